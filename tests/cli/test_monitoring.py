"""``rollout-telemetry monitoring``: the configuration, rules and dashboard written for a user without the
repository; a wrong input is one line and exit status 2 (promtool's check of what it writes: tests/e2e)."""

from __future__ import annotations

import os
import stat
import threading
import tracemalloc
from pathlib import Path

import pytest
import yaml

from dashboards import generate
from rollout_telemetry._cli.main import main
from rollout_telemetry._cli.monitoring import FILES, prometheus_config


def test_it_writes_the_configuration_and_the_packages_rules_and_dashboard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rules and dashboard are the package's files byte for byte; the configuration scrapes each URL
    given as job ``rollout-telemetry`` (which the rules' ``up`` alert reads) and loads ``rules.yml``; what
    is printed names each file and the command that runs Prometheus on them."""
    folder = tmp_path / "new" / "monitoring"
    scrape = ["--scrape", "http://10.0.0.1:9464/metrics", "--scrape", "http://10.0.0.2:9465/metrics"]
    assert main(["monitoring", str(folder), *scrape]) == 0
    assert (folder / "rules.yml").read_bytes() == generate.RULES_PATH.read_bytes()
    assert (folder / "rollout-progress.json").read_bytes() == generate.PATH.read_bytes()
    config = yaml.safe_load((folder / "prometheus.yml").read_text())
    assert config["rule_files"] == ["rules.yml"]
    (job,) = config["scrape_configs"]
    assert (job["job_name"], job["scheme"], job["metrics_path"]) == ("rollout-telemetry", "http", "/metrics")
    assert job["static_configs"] == [{"targets": ["10.0.0.1:9464", "10.0.0.2:9465"]}]
    assert 'up{job="rollout-telemetry"}' in (folder / "rules.yml").read_text()
    out = capsys.readouterr().out
    assert f"prometheus --config.file={folder / 'prometheus.yml'} " in out
    assert all(str(folder / name) in out for name in ("rules.yml", "rollout-progress.json"))


def test_tls_and_basic_auth_go_into_the_scrape_job(tmp_path: Path) -> None:
    """https:// URLs with a CA, a user and a password file: the job has the CA, the user and the password
    file as absolute paths (Prometheus reads them relative to itself otherwise), and no password."""
    (tmp_path / "ca.pem").write_text("ca")
    (tmp_path / "password").write_text("secret")
    argv = ["monitoring", "out", "--scrape", "https://trainer-7:9464/custom"]
    auth = ["--ca-file", "ca.pem", "--user", "prometheus", "--password-file", "password"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert main([*argv, *auth]) == 0
    text = (tmp_path / "out" / "prometheus.yml").read_text()
    (job,) = yaml.safe_load(text)["scrape_configs"]
    assert (job["scheme"], job["metrics_path"]) == ("https", "/custom")
    assert job["tls_config"] == {"ca_file": str(tmp_path / "ca.pem")}
    assert job["basic_auth"] == {"username": "prometheus", "password_file": str(tmp_path / "password")}
    assert job["static_configs"] == [{"targets": ["trainer-7:9464"]}]
    assert "secret" not in text


def test_an_existing_file_that_differs_is_kept_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Writing twice is fine; a file edited since is kept (one line naming it, status 2) until ``--force``."""
    assert main(["monitoring", str(tmp_path)]) == 0
    assert main(["monitoring", str(tmp_path)]) == 0
    (tmp_path / "rules.yml").write_text("# my own rules\n")
    capsys.readouterr()
    assert main(["monitoring", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{tmp_path / 'rules.yml'} exists and differs: --force to overwrite it" in err
    assert (tmp_path / "rules.yml").read_text() == "# my own rules\n"
    assert main(["monitoring", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "rules.yml").read_bytes() == generate.RULES_PATH.read_bytes()


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--scrape", "127.0.0.1:9464"], "must be an http:// or https:// URL"),
        (["--scrape", "http://a:1/metrics", "--scrape", "https://b:1/metrics"], "the same scheme and path"),
        (["--user", "prometheus"], "--user and --password-file go together"),
    ],
)
def test_a_wrong_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    """A scrape address without a scheme, URLs of two schemes, a user without a password file: one line on
    stderr saying what is wrong, status 2, nothing written."""
    folder = tmp_path / "out"
    assert main(["monitoring", str(folder), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err  # noqa: PT018
    assert not folder.exists()


def test_a_folder_that_cannot_be_written_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DIR under a regular file: one line naming the folder, status 2."""
    (tmp_path / "file").write_text("")
    assert main(["monitoring", str(tmp_path / "file" / "monitoring")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot write to {tmp_path / 'file' / 'monitoring'}" in err  # noqa: PT018


def test_a_scrape_url_with_a_user_or_a_query_is_refused_and_paths_keep_their_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user or a query in a --scrape URL would be dropped from the job: refused, in one line. A path of
    characters beyond ASCII is written as it is (an escape YAML reads as half a character pair is not)."""
    for url in ("http://me:secret@h:9464/metrics", "http://h:9464/metrics?x=1"):
        assert main(["monitoring", str(tmp_path / "out"), "--scrape", url]) == 2
        assert "without a user, query or fragment" in capsys.readouterr().err
    ca = tmp_path / "c\N{GRINNING FACE}.pem"
    ca.write_text("ca")
    assert (
        main(["monitoring", str(tmp_path / "ok"), "--scrape", "https://h:9464/metrics", "--ca-file", str(ca)])
        == 0
    )
    text = (tmp_path / "ok" / "prometheus.yml").read_text(encoding="utf-8")
    assert "\N{GRINNING FACE}" in text
    assert yaml.safe_load(text)["scrape_configs"][0]["tls_config"]["ca_file"] == str(ca)


def _refused(folder: Path, err: str, name: str, what: str) -> None:
    """One line on stderr naming ``folder / name`` and what it is; nothing written in ``folder``."""
    assert err.count("\n") == 1, err
    assert f"{folder / name} is {what}, not a regular file" in err, err
    assert sorted(os.listdir(folder)) == [name], "nothing else written"


def test_a_dangling_link_in_dir_is_refused_and_nothing_is_created_outside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DIR/prometheus.yml a link to a file that does not exist outside DIR: refused in one line, status 2,
    the link's target not created and no other file written."""
    folder, outside = tmp_path / "monitoring", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "prometheus.yml").symlink_to(outside / "x")
    assert main(["monitoring", str(folder)]) == 2
    _refused(folder, capsys.readouterr().err, "prometheus.yml", "a symbolic link")
    assert list(outside.iterdir()) == []
    assert (folder / "prometheus.yml").is_symlink()


def test_a_link_to_a_file_is_not_overwritten_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DIR/rules.yml a link to a file outside DIR: refused even with --force, the target's bytes unchanged
    and the link still a link."""
    folder, target = tmp_path / "monitoring", tmp_path / "mine.yml"
    folder.mkdir()
    target.write_text("# my own rules\n")
    (folder / "rules.yml").symlink_to(target)
    assert main(["monitoring", str(folder), "--force"]) == 2
    _refused(folder, capsys.readouterr().err, "rules.yml", "a symbolic link")
    assert target.read_text() == "# my own rules\n"
    assert (folder / "rules.yml").readlink() == target


def test_a_link_to_dev_zero_is_refused_without_reading_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DIR/prometheus.yml a link to /dev/zero (endless): refused at once, in one line, never read."""
    folder = tmp_path / "monitoring"
    folder.mkdir()
    (folder / "prometheus.yml").symlink_to("/dev/zero")
    tracemalloc.start()
    try:
        assert main(["monitoring", str(folder), "--force"]) == 2
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    _refused(folder, capsys.readouterr().err, "prometheus.yml", "a symbolic link")
    assert peak < 8 * 2**20


def test_a_fifo_in_dir_is_refused_promptly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """DIR/rollout-progress.json a named pipe with no writer: refused in one line, status 2, without waiting
    on the pipe (the command runs in a thread, so a wait fails this test instead of hanging the tier)."""
    folder = tmp_path / "monitoring"
    folder.mkdir()
    os.mkfifo(folder / "rollout-progress.json")
    status: list[int] = []
    command = threading.Thread(target=lambda: status.append(main(["monitoring", str(folder)])), daemon=True)
    command.start()
    command.join(timeout=30)
    assert not command.is_alive(), "the command waits on the pipe"
    assert status == [2]
    _refused(folder, capsys.readouterr().err, "rollout-progress.json", "a named pipe (FIFO)")


def test_a_directory_where_a_file_should_be_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DIR/prometheus.yml a folder: one line naming it and saying it is a directory, status 2, nothing
    written (the files are all checked before any is written, so rules.yml is not written either)."""
    folder = tmp_path / "monitoring"
    (folder / "prometheus.yml").mkdir(parents=True)
    assert main(["monitoring", str(folder), "--force"]) == 2
    _refused(folder, capsys.readouterr().err, "prometheus.yml", "a directory")


def test_a_large_existing_file_is_compared_by_its_first_bytes_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing rules.yml of 64 MiB (sparse) differs from the package's: said as before, status 2, and
    what is read to tell is at most what would be written, not the whole file."""
    folder = tmp_path / "monitoring"
    folder.mkdir()
    (folder / "rules.yml").touch()
    os.truncate(folder / "rules.yml", 64 * 2**20)
    tracemalloc.start()
    try:
        assert main(["monitoring", str(folder)]) == 2
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "rules.yml exists and differs: --force to overwrite it" in capsys.readouterr().err
    assert peak < 8 * 2**20
    assert sorted(os.listdir(folder)) == ["rules.yml"]


def test_the_files_are_written_whole_as_before(tmp_path: Path) -> None:
    """The normal case: the three files are regular files readable by Prometheus' own user (mode 0644),
    prometheus.yml is ``prometheus_config``'s text byte for byte, nothing else is left in DIR, and a file
    edited since is replaced by a new file with --force (its other names, hard links, keep the edit)."""
    folder = tmp_path / "monitoring"
    scrape = "http://10.0.0.1:9464/metrics"
    assert main(["monitoring", str(folder), "--scrape", scrape]) == 0
    assert sorted(os.listdir(folder)) == sorted(["prometheus.yml", *FILES])
    assert (folder / "prometheus.yml").read_bytes() == prometheus_config([scrape]).encode("utf-8")
    for name in os.listdir(folder):
        mode = os.lstat(folder / name).st_mode
        assert stat.S_ISREG(mode) and stat.S_IMODE(mode) == 0o644, name  # noqa: PT018
    (folder / "rules.yml").write_text("# my own rules\n")
    os.link(folder / "rules.yml", tmp_path / "kept.yml")
    assert main(["monitoring", str(folder), "--scrape", scrape, "--force"]) == 0
    assert (folder / "rules.yml").read_bytes() == generate.RULES_PATH.read_bytes()
    assert (tmp_path / "kept.yml").read_text() == "# my own rules\n"
    assert sorted(os.listdir(folder)) == sorted(["prometheus.yml", *FILES])


REFUSED_CHARACTERS = [
    ("\x7f", "the control character U+007F"),  # DEL: YAML refuses it in a file
    ("\x80", "the control character U+0080"),  # C1
    ("\x85", "the control character U+0085"),  # NEL: YAML reads a line break, folded into a space
    ("\x9f", "the control character U+009F"),
    ("\x01", "the control character U+0001"),  # C0: escaped, but no name means one
    ("\t", "the control character U+0009"),  # urlsplit drops it from a URL unsaid
    ("\ufffe", "the non-character U+FFFE"),  # YAML refuses it
    ("\uffff", "the non-character U+FFFF"),
    ("\udcff", "a byte that is not UTF-8, the lone surrogate U+DCFF"),  # argv's byte 0xFF
]
VALUES = {
    "--scrape": ["--scrape", "http://h:9464/metrics{}"],
    "--user": ["--user", "prom{}", "--password-file", "password"],
    "--password-file": ["--user", "prometheus", "--password-file", "pass{}word"],
    "--ca-file": ["--scrape", "https://h:9464/metrics", "--ca-file", "ca{}.pem"],
}


@pytest.mark.parametrize("option", VALUES)
@pytest.mark.parametrize(("character", "said"), REFUSED_CHARACTERS, ids=lambda c: ascii(c)[1:-1])
def test_a_character_a_configuration_cannot_hold_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, character: str, said: str
) -> None:
    """DEL, the C1 controls (NEL among them), the C0 controls, U+FFFE/U+FFFF and a byte that is not UTF-8, in
    any value written into prometheus.yml: one line naming the option and the character as U+XXXX, status 2,
    nothing written (promtool refused the configuration, or YAML turned NEL into a space)."""
    argv = [part.format(character) for part in VALUES[option]]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert main(["monitoring", "out", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"rollout-telemetry monitoring: {option}: contains {said};" in err, err
    assert not (tmp_path / "out").exists()
