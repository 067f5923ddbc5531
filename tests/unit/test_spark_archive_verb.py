"""`splitlab spark archive`: names the class archive there is without starting Spark; records one otherwise
(`make test` runs it on a fresh machine, beside building the images)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from chaos.cli import analysis
from pipeline import jvm_archive, session


def test_an_archive_there_is_named_and_no_jvm_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(jvm_archive.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(session, "spark_session", lambda *args, **kwargs: pytest.fail("Spark started"))
    whole = tmp_path / f"spark-{jvm_archive._runtime_digest()}.100.jsa"
    whole.write_bytes(b"x" * 100)
    assert analysis.cmd_spark_archive(argparse.Namespace()) == 0
    assert str(whole) in capsys.readouterr().out.replace("\n", "")


def test_keep_now_without_a_recording_of_its_own_only_names_the_archive(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm_archive.CACHE_ENV, str(tmp_path))
    assert jvm_archive.keep_now() is None
    whole = tmp_path / f"spark-{jvm_archive._runtime_digest()}.5.jsa"
    whole.write_bytes(b"whole")
    assert jvm_archive.keep_now() == whole
