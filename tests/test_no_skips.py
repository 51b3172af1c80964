"""MINILLM_NO_SKIPS=1 (set by .ci/run) makes a run with a skipped test or module fail."""
import pytest

pytest_plugins = ["pytester"]

TESTS = """
import pytest

def test_passes():
    assert True

def test_skips():
    pytest.skip("no such peer here")
"""
MODULE_SKIP = """
import pytest
pytest.skip("no such file", allow_module_level=True)

def test_never_runs():
    assert False
"""


@pytest.mark.parametrize("source", [TESTS, MODULE_SKIP])
def test_a_skip_fails_the_run_only_when_asked(pytester, monkeypatch, source):
    pytester.makepyfile(test_some=source, test_other="def test_passes():\n    assert True\n")
    monkeypatch.delenv("MINILLM_NO_SKIPS", raising=False)
    assert pytester.runpytest("-p", "no_skips").ret == pytest.ExitCode.OK
    monkeypatch.setenv("MINILLM_NO_SKIPS", "1")
    result = pytester.runpytest("-p", "no_skips")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*skipped under MINILLM_NO_SKIPS=1*", "*test_some.py*no such*"])


def test_a_run_without_skips_still_passes(pytester, monkeypatch):
    pytester.makepyfile(test_some="def test_passes():\n    assert True\n")
    monkeypatch.setenv("MINILLM_NO_SKIPS", "1")
    assert pytester.runpytest("-p", "no_skips").ret == pytest.ExitCode.OK
