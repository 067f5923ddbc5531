"""The test bed's SSH key (`chaos.hosts.bed`): an Ed25519 pair in OpenSSH's formats, the private half readable by
its owner only and loadable by paramiko as the controller's connections load it, the public line the one the bed's
hosts authorise. (The multi-host cluster tests log in with it over real SSH.)"""
from __future__ import annotations

import stat
from pathlib import Path

import paramiko

from chaos.hosts import bed


def test_the_beds_key_is_ed25519_its_owners_only_and_its_public_line_is_the_private_keys(tmp_path: Path) -> None:
    public = bed._write_key(tmp_path)
    private = tmp_path / bed.KEY_FILE
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key = paramiko.PKey.from_path(private)
    assert isinstance(key, paramiko.Ed25519Key)
    assert public == f"ssh-ed25519 {key.get_base64()} splitlab-bed"
    assert (tmp_path / f"{bed.KEY_FILE}.pub").read_text() == public + "\n"


def test_a_key_left_in_the_beds_directory_is_replaced_and_made_private_again(tmp_path: Path) -> None:
    left = tmp_path / bed.KEY_FILE
    left.write_text("an earlier bed's key\n")
    left.chmod(0o644)
    public = bed._write_key(tmp_path)
    assert stat.S_IMODE(left.stat().st_mode) == 0o600
    assert paramiko.PKey.from_path(left).get_base64() == public.split()[1]
