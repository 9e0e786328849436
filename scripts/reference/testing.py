# Minimal runner so the reference's test_*.py files run with plain python3 (pytest also works).
import sys
import traceback


def run_tests(namespace: dict) -> None:
    """Runs every callable named test_* in `namespace`, prints each result and the closing
    'N passed, N failed' line, and exits non-zero on a failure."""
    tests = [(name, fn) for name, fn in namespace.items() if name.startswith("test_") and callable(fn)]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"PASS {name}")
        except Exception:  # report every failing test, not just the first
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
