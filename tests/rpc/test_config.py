"""Server settings (config file + flags), the token sources and the loopback rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.rpc.auth import (
    InsecureBind,
    bearer_matches,
    check_bind_security,
    is_loopback_host,
    load_token,
)
from adapters.rpc.config import load_config_file, resolve_settings
from adapters.rpc_server_cli import main, parse_args, settings_from_args
from core.errors import InvalidInput

TOKEN = "0123456789abcdef-token"


def write_config(folder: Path, server: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "server.json"
    path.write_text(json.dumps({"server": server}), encoding="utf-8")
    return path


def problems_of(exc: InvalidInput) -> dict[str, str]:
    return {problem.field: problem.reason for problem in exc.problems}


def test_file_settings_resolve_relative_paths_against_the_files_folder(tmp_path: Path) -> None:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    (conf_dir / "token.txt").write_text(TOKEN + "\n", encoding="utf-8")
    path = write_config(
        conf_dir,
        {
            "store_root": "data/store",
            "scheduler": {"enabled": True, "poll_interval_s": 0.5, "max_concurrent_runs": 2},
            "rpc": {"host": "0.0.0.0", "port": 9100, "path": "/api/rpc", "max_body_bytes": 2048},
            "auth": {"token_file": "token.txt"},
        },
    )
    settings = resolve_settings(config_path=path, environ={}, cwd=tmp_path / "elsewhere")
    assert settings.store_root == (conf_dir / "data" / "store").resolve()
    assert (settings.host, settings.port, settings.rpc_path) == ("0.0.0.0", 9100, "/api/rpc")
    assert settings.max_body_bytes == 2048
    assert settings.scheduler.enabled is True
    assert settings.scheduler.poll_interval_s == 0.5
    assert settings.scheduler.max_concurrent_runs == 2
    assert settings.token == TOKEN
    assert settings.config_path == path.resolve()


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "conf",
        {"store_root": "a", "rpc": {"host": "127.0.0.1", "port": 9100}, "auth": {"token_env": "T"}},
    )
    settings = resolve_settings(
        config_path=path,
        store_root=Path("b"),
        host="::1",
        port=9200,
        enable_scheduler=True,
        token_file=None,
        token_env="OTHER",
        environ={"T": "t" * 20, "OTHER": TOKEN},
        cwd=tmp_path,
    )
    assert settings.store_root == (tmp_path / "b").resolve()
    assert (settings.host, settings.port) == ("::1", 9200)
    assert settings.scheduler.enabled is True
    assert settings.token == TOKEN


def test_defaults_without_a_file(tmp_path: Path) -> None:
    settings = resolve_settings(store_root=Path("s"), environ={}, cwd=tmp_path)
    assert (settings.host, settings.port, settings.rpc_path) == ("127.0.0.1", 8765, "/rpc")
    assert settings.scheduler.enabled is False
    assert settings.token is None


def test_every_problem_in_the_file_is_named_at_once(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        {
            "store_root": 5,
            "scheduler": {"enabled": "maybe", "poll_interval_s": 0, "turbo": True},
            "rpc": {"port": 70000, "colour": "red"},
            "extra": 1,
        },
    )
    with pytest.raises(InvalidInput) as caught:
        load_config_file(path)
    found = problems_of(caught.value)
    assert set(found) == {
        "server.store_root",
        "server.scheduler.enabled",
        "server.scheduler.poll_interval_s",
        "server.scheduler.turbo",
        "server.rpc.port",
        "server.rpc.colour",
        "server.extra",
    }
    assert found["server.extra"] == "unknown setting"
    assert found["server.scheduler.turbo"] == "unknown setting"


def test_cross_field_rules(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        {"rpc": {"path": "/healthz"}, "auth": {"token_file": "a", "token_env": "B"}},
    )
    with pytest.raises(InvalidInput) as caught:
        load_config_file(path)
    assert set(problems_of(caught.value)) == {"server.rpc.path", "server.auth"}


BAD_FILES: list[tuple[str, str]] = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
]


@pytest.mark.parametrize(("text", "reason"), BAD_FILES)
def test_unparseable_files(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "server.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInput) as caught:
        load_config_file(path)
    assert reason in problems_of(caught.value)["config"]


def test_missing_file_and_missing_store_root(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_settings(config_path=tmp_path / "nope.json", environ={}, cwd=tmp_path)
    assert "cannot read" in problems_of(caught.value)["config"]
    with pytest.raises(InvalidInput) as caught:
        resolve_settings(environ={}, cwd=tmp_path)
    assert set(problems_of(caught.value)) == {"store_root"}


def test_a_store_root_that_is_not_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a store\n", encoding="utf-8")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone" / "store")
    cases = {
        Path("a-file"): f"{tmp_path / 'a-file'} exists and is not a directory",
        Path("a-file/store"): f"cannot create {tmp_path / 'a-file' / 'store'}:"
        f" {tmp_path / 'a-file'} is not a directory",
        Path("dangling"): f"{tmp_path / 'dangling'} is a dangling symbolic link",
    }
    for flag, reason in cases.items():
        with pytest.raises(InvalidInput) as caught:
            resolve_settings(store_root=flag, environ={}, cwd=tmp_path)
        assert problems_of(caught.value) == {"store_root": reason}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "dangling"]
    fresh = resolve_settings(store_root=Path("new/deeper/store"), environ={}, cwd=tmp_path)
    assert fresh.store_root == tmp_path / "new" / "deeper" / "store"


TOKEN_CASES: list[tuple[dict[str, Any], dict[str, str], str | None, str | None]] = [
    ({}, {}, None, None),
    ({"token_env": "TOK"}, {"TOK": TOKEN}, TOKEN, None),
    ({"token_env": "TOK"}, {"TOK": f"  {TOKEN}\n"}, TOKEN, None),
    ({"token_env": "TOK"}, {}, None, "server.auth.token_env"),
    ({"token_env": "TOK"}, {"TOK": "short"}, None, "server.auth.token_env"),
    ({"token_env": "TOK"}, {"TOK": "has a space in it ok"}, None, "server.auth.token_env"),
    ({"token_env": "TOK", "token_file": Path("x")}, {"TOK": TOKEN}, None, "server.auth"),
    ({"token_file": Path("/nonexistent/token")}, {}, None, "server.auth.token_file"),
]


@pytest.mark.parametrize(("sources", "environ", "token", "bad_field"), TOKEN_CASES)
def test_token_sources(
    sources: dict[str, Any], environ: dict[str, str], token: str | None, bad_field: str | None
) -> None:
    if bad_field is None:
        assert load_token(**sources, environ=environ) == token
    else:
        with pytest.raises(InvalidInput) as caught:
            load_token(**sources, environ=environ)
        assert [p.field for p in caught.value.problems] == [bad_field]


BIND_CASES: list[tuple[str, bool]] = [
    ("127.0.0.1", True),
    ("127.8.9.10", True),
    ("localhost", True),
    ("LOCALHOST", True),
    ("::1", True),
    ("[::1]", True),
    ("0.0.0.0", False),
    ("::", False),
    ("192.168.1.20", False),
    ("10.0.0.1", False),
    ("scheduler.example.com", False),
    ("", False),
]


@pytest.mark.parametrize(("host", "loopback"), BIND_CASES)
def test_non_loopback_needs_a_token(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
    check_bind_security(host, TOKEN)
    if loopback:
        check_bind_security(host, None)
    else:
        with pytest.raises(InsecureBind) as caught:
            check_bind_security(host, None)
        assert "without a bearer token" in str(caught.value)
        assert "token_file" in str(caught.value)


BEARER_CASES: list[tuple[str | None, bool]] = [
    (None, False),
    ("", False),
    ("Bearer", False),
    (f"Bearer {TOKEN}", True),
    (f"bearer {TOKEN}", True),
    (f"Bearer  {TOKEN} ", True),
    (f"Bearer {TOKEN[:-1]}", False),
    (f"Token {TOKEN}", False),
    (TOKEN, False),
    ("Bearer ñ-not-ascii", False),
]


@pytest.mark.parametrize(("header", "ok"), BEARER_CASES)
def test_bearer_header_matching(header: str | None, ok: bool) -> None:
    assert bearer_matches(header, TOKEN) is ok


def test_environment_stands_in_for_port_and_host_flags(tmp_path: Path) -> None:
    args = parse_args(["--store-root", "s"])
    settings = settings_from_args(
        args, environ={"WF_RPC_PORT": "9300", "WF_RPC_HOST": "::1"}, cwd=tmp_path
    )
    assert (settings.host, settings.port) == ("::1", 9300)
    flagged = settings_from_args(
        parse_args(["--store-root", "s", "--port", "9400"]),
        environ={"WF_RPC_PORT": "9300"},
        cwd=tmp_path,
    )
    assert flagged.port == 9400
    with pytest.raises(InvalidInput) as caught:
        settings_from_args(args, environ={"WF_RPC_PORT": "eighty"}, cwd=tmp_path)
    assert set(problems_of(caught.value)) == {"port"}


def test_server_refuses_public_address_without_token_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # main() checks before it opens the store or binds, so no public socket is opened.
    monkeypatch.chdir(tmp_path)
    for name in ("WF_RPC_HOST", "WF_RPC_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["--store-root", "store", "--host", "0.0.0.0"])
    assert exited.value.code == 2
    assert "refusing to listen on '0.0.0.0' without a bearer token" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_invalid_config_exits_2_listing_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, {"rpc": {"port": "80"}, "auth": {"token_env": "NOPE_UNSET"}})
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(path)])
    assert exited.value.code == 2
    stderr = capsys.readouterr().err
    assert "cannot start, invalid settings" in stderr
    assert "server.rpc.port" in stderr
