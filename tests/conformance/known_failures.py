"""Declared conformance failures: OpInfo name → why rlx does not match PyTorch there (one table)."""

KNOWN: dict[str, str] = {
    "bernoulli": "random op: eager draws differ from any replay",
    "normal": "random op",
    "rand_like": "random op",
    "randn_like": "random op",
    "randint_like": "random op",
    "nn.functional.dropout": "random op in training mode",
    "empty": "uninitialised memory: rlx returns zeros",
    "empty_like": "uninitialised memory: rlx returns zeros",
    "new_empty": "uninitialised memory: rlx returns zeros",
    "empty_strided": "uninitialised memory: rlx returns zeros",
    "new_empty_strided": "uninitialised memory: rlx returns zeros",
    "nonzero": "data-dependent output shape",
}
