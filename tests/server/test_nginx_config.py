"""render_config is pure; nginx itself checks what it renders (`nginx -t`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from drainsafe.lab.netpath.nginx import STREAM_MODULE, HttpUpstream, StreamUpstream, render_config


def test_l4_has_no_retries_and_loads_the_stream_module(tmp_path: Path) -> None:
    text = render_config(stream=[StreamUpstream("pods", "127.3.0.1:8080",
                                                ["127.3.0.2:80", "127.3.0.3:80"])],
                         workdir=tmp_path)
    assert text.startswith(f"load_module {STREAM_MODULE};")
    assert "proxy_next_upstream off;" in text
    assert "server 127.3.0.2:80;" in text and "server 127.3.0.3:80;" in text
    assert str(tmp_path / "error.log") in text and "/var/log" not in text


def test_l7_keeps_upstream_connections_alive_and_does_not_buffer(tmp_path: Path) -> None:
    text = render_config(http=[HttpUpstream("pods", "127.3.0.1:8081", ["127.3.0.2:80"],
                                            keepalive=8)], workdir=tmp_path)
    assert "load_module" not in text
    assert "keepalive 8;" in text and "proxy_http_version 1.1;" in text
    assert 'proxy_set_header Connection "";' in text and "proxy_buffering off;" in text
    assert "proxy_next_upstream" not in text  # nginx's default retry rules, as an ingress


def test_empty_upstream_renders_a_down_placeholder(tmp_path: Path) -> None:
    text = render_config(http=[HttpUpstream("pods", "127.3.0.1:8081", [])], workdir=tmp_path)
    assert " down;" in text


def test_bad_names_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="used twice"):
        render_config(stream=[StreamUpstream("a", "127.3.0.1:1", ["127.0.0.1:2"])],
                      http=[HttpUpstream("a", "127.3.0.1:3", ["127.0.0.1:4"])],
                      workdir=tmp_path)
    with pytest.raises(ValueError, match="letters, digits"):
        render_config(http=[HttpUpstream("a b", "127.3.0.1:3", [])], workdir=tmp_path)


def test_nginx_accepts_what_is_rendered(tmp_path: Path) -> None:
    text = render_config(stream=[StreamUpstream("l4", "127.3.0.1:18080", ["127.3.0.2:80"])],
                         http=[HttpUpstream("l7", "127.3.0.1:18081", ["127.3.0.2:80"])],
                         workdir=tmp_path)
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    done = subprocess.run(["nginx", "-t", "-q", "-p", str(tmp_path), "-c", str(conf),
                           "-e", str(tmp_path / "error.log")], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
