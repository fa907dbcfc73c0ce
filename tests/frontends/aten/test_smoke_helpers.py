import pytest
import torch

from helpers import assert_converts_and_matches, rand, with_specials


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_add_matches(dtype):
    assert_converts_and_matches(lambda a, b: a + b, (rand((2, 3), dtype), rand((3,), dtype, seed=1)))


def test_specials_propagate():
    assert_converts_and_matches(lambda a: torch.exp(a) * 2, (with_specials(rand((3, 4))),))
