"""The one error path every command shares (issue 18), and the exit codes in every --help."""

from __future__ import annotations

import pytest

from drainsafe import cli
from drainsafe.shell import EXIT_INTERNAL


def test_unexpected_exception_is_a_message_naming_the_command_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # A narrow unit test of the error mapping: the handler is replaced by one that fails
    # the way a bug would.
    import drainsafe.check.command as command

    def broken(*_: object) -> int:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(command, "main", broken)
    monkeypatch.delenv("DRAINSAFE_DEBUG", raising=False)
    code = cli.main(["check", "deploy/app.yaml"])
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL == 70  # not 1, which means "findings" to a script
    assert "drainsafe check: unexpected error: RecursionError: maximum recursion" in err
    assert "while running: drainsafe check deploy/app.yaml" in err
    assert "Traceback" not in err


def test_debug_setting_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import drainsafe.check.command as command

    def broken(*_: object) -> int:
        raise KeyError("x")

    monkeypatch.setattr(command, "main", broken)
    monkeypatch.setenv("DRAINSAFE_DEBUG", "1")
    with pytest.raises(KeyError):
        cli.main(["check", "a.yaml"])


def test_every_command_documents_its_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices
    for name in sub.choices:
        with pytest.raises(SystemExit):
            cli.main([name, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "exit codes shared by every command: 2 usage or input error; 70" in text, name
