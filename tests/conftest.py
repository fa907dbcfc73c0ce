import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_addoption(parser):
    parser.addoption(
        "--engine",
        default="numpy",
        choices=("numpy", "jax", "onnxruntime", "openvino"),
        help="the engine the lowering tests run on where a test names none (default numpy); "
        "a program that engine refuses is skipped with its reason",
    )


def pytest_configure(config):
    import helpers

    helpers.DEFAULT_ENGINE = config.getoption("--engine")
