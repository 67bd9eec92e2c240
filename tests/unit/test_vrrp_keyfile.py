"""vipd.vrrp.keyfile: keys only from files that nobody else can read, errors that name the
file and the rule but never the key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vipd.vrrp.keyfile import KeyFileError, read_key, read_keyring

KEY = bytes(range(32))
ME = frozenset({os.geteuid()})


def write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def test_reads_hex_and_ascii_key_files(tmp_path: Path) -> None:
    hexed = write(tmp_path / "k1", b"hex:" + KEY.hex().encode() + b"\n")
    assert read_key(hexed, owners=ME) == KEY
    ascii_key = b"vipd-test-passphrase-thirty-two-bytes"
    assert read_key(write(tmp_path / "k2", ascii_key, 0o400), owners=ME) == ascii_key


def test_follows_a_secret_volume_symlink(tmp_path: Path) -> None:
    data = tmp_path / "..data"
    data.mkdir()
    write(data / "1", b"hex:" + KEY.hex().encode())
    (tmp_path / "1").symlink_to(data / "1")
    assert read_key(tmp_path / "1", owners=ME) == KEY


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o610, 0o601])
def test_refuses_group_or_world_access(tmp_path: Path, mode: int) -> None:
    path = write(tmp_path / "k", b"hex:" + KEY.hex().encode(), mode)
    with pytest.raises(KeyFileError, match=f"mode {mode:04o} gives group or others access"):
        read_key(path, owners=ME)


def test_refuses_a_file_owned_by_someone_else(tmp_path: Path) -> None:
    path = write(tmp_path / "k", b"hex:" + KEY.hex().encode())
    other = frozenset({os.geteuid() + 1})
    with pytest.raises(KeyFileError, match=f"owned by uid {os.geteuid()}, must be owned by"):
        read_key(path, owners=other)


def test_default_owners_are_root_and_us(tmp_path: Path) -> None:
    path = write(tmp_path / "k", b"hex:" + KEY.hex().encode())
    assert read_key(path) == KEY


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"hex:" + b"ab" * 31, "31 bytes"),
        (b"hex:" + b"ab" * 65, "65 bytes"),
        (b"hex:" + b"ab" * 100, "more than 134 bytes"),
        (b"tooshortsecret\n", "14 bytes"),
        (b"hex:" + b"zz" * 32, "not a hex digit"),
    ],
)
def test_bad_content_is_refused_without_quoting_it(
    tmp_path: Path, content: bytes, why: str
) -> None:
    path = write(tmp_path / "k", content)
    with pytest.raises(KeyFileError, match=why) as e:
        read_key(path, owners=ME)
    assert str(path) in str(e.value)
    assert "tooshort" not in str(e.value) and "abab" not in str(e.value)
    assert "zzzz" not in str(e.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="cannot open"):
        read_key(tmp_path / "absent", owners=ME)
    (tmp_path / "d").mkdir(mode=0o700)
    with pytest.raises(KeyFileError, match="not a regular file"):
        read_key(tmp_path / "d", owners=ME)


def test_keyring_from_files(tmp_path: Path) -> None:
    other = bytes(range(50, 90))
    paths = {
        1: write(tmp_path / "1", b"hex:" + KEY.hex().encode()),
        2: write(tmp_path / "2", b"hex:" + other.hex().encode()),
    }
    ring = read_keyring(paths, 2, owners=ME)
    assert dict(ring.keys) == {1: KEY, 2: other} and ring.active == 2
    with pytest.raises(KeyFileError, match="active key 3"):
        read_keyring(paths, 3, owners=ME)
