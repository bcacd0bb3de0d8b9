"""Where the tests find the repository and what lies beside it, wherever a test file sits under tests/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the repository: app/, bench/, presets/, pyproject.toml
SCHEMAS = TESTS / "data_schemas"  # the corpus of dataset layouts modelled on public datasets
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k_train.jsonl"  # the real GSM8K train set, referenced in place
