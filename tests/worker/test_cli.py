"""The command line: flags and environment, GPU discovery through NVML when it is there (a fake
pynvml here: no GPU on the test machine), readable logs, and no Django anywhere in the daemon."""

import json
import logging
import subprocess
import sys

import pytest

from klique.worker import cli
from klique.worker.gpus import Nvml
from tests.worker.fakes import fake_pynvml


def args(*argv):
    return cli.parser().parse_args(["--server", "http://x", "--enrolment-token", "kqe_x", *argv])


def test_nvml_finds_the_gpus_and_their_stats(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(2))
    nvml = Nvml.open()
    assert [(g.index, g.uuid, g.name, g.memory_mb) for g in nvml.gpus()] == [
        (0, "GPU-uuid-0", "NVIDIA H100", 81920),
        (1, "GPU-uuid-1", "NVIDIA H100", 81920),
    ]
    assert nvml.stats()[1] == {
        "index": 1,
        "utilization_pct": 41,
        "memory_used_mb": 1024,
        "memory_total_mb": 81920,
        "temperature_c": 60,
    }
    assert cli.devices(args(), nvml) == ["GPU-uuid-0", "GPU-uuid-1"]
    assert cli.devices(args("--gpus", "1"), nvml) == ["GPU-uuid-0"]


def test_without_nvml_the_gpus_come_from_the_flag(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert Nvml.open() is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
    assert Nvml.open() is None
    assert cli.devices(args("--gpus", "3"), None) == ["0", "1", "2"]
    assert cli.devices(args(), None) is None


def test_flags_fall_back_to_the_environment(monkeypatch, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("kqe_from_file\n")
    monkeypatch.setenv("KLIQUE_SERVER", "https://klique.example.org")
    monkeypatch.setenv("KLIQUE_ENROLMENT_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("KLIQUE_WORKER_MODE", "slurm")
    monkeypatch.setenv("KLIQUE_SBATCH_ARGS", "--account=ml --qos=low")
    parsed = cli.parser().parse_args([])
    assert parsed.server == "https://klique.example.org" and parsed.mode == "slurm"
    assert cli.enrolment_token(parsed) == "kqe_from_file"
    assert parsed.sbatch_arg == ["--account=ml", "--qos=low"]


def test_a_missing_server_or_token_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("KLIQUE_SERVER", raising=False)
    monkeypatch.delenv("KLIQUE_ENROLMENT_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--gpus", "1"])
    assert exit_.value.code == 2 and "--server" in capsys.readouterr().err


def test_no_gpus_and_no_nvml_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(SystemExit):
        cli.main(["--server", "http://x", "--enrolment-token", "kqe_x"])
    assert "--gpus N" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--max-claim", "0"], "--max-claim"),
        (["--max-claim", "101"], "--max-claim"),
        (["--wait", "-1"], "--wait"),
    ],
)
def test_a_claim_bound_or_wait_out_of_range_is_a_usage_error(capsys, flags, named):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--server", "http://x", "--enrolment-token", "kqe_x", "--gpus", "1", *flags])
    assert exit_.value.code == 2 and named in capsys.readouterr().err


@pytest.mark.parametrize("hostname", ["gpu\u202e01", "gpu_01", "gpu 01"])
def test_a_hostname_the_control_plane_would_refuse_is_a_usage_error_naming_the_flag(
    monkeypatch, capsys, hostname
):
    """The control plane takes RFC 1123 host names only; a host whose own name is not one (from
    socket.gethostname) is told to set --hostname, instead of failing enrolment over and over."""
    monkeypatch.setattr(cli.socket, "gethostname", lambda: hostname)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--server", "http://x", "--enrolment-token", "kqe_x", "--gpus", "1"])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and "--hostname" in error and "KLIQUE_WORKER_HOSTNAME" in error


def test_this_machines_own_name_is_a_valid_hostname():
    from klique.worker.hostnames import hostname_error

    assert hostname_error(args().hostname) is None


def test_the_claim_bound_and_wait_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("KLIQUE_WORKER_MAX_CLAIM", "12")
    monkeypatch.setenv("KLIQUE_WORKER_WAIT_S", "0")
    parsed = cli.parser().parse_args([])
    assert parsed.max_claim == 12 and parsed.wait == 0


def record(message, **fields):
    entry = logging.LogRecord("klique.worker", logging.INFO, __file__, 1, message, None, None)
    entry.fields = fields
    entry.created = 1772442000.0
    return entry


def test_logs_read_as_key_value_lines_or_json():
    text = cli.Formatter(as_json=False).format(record("claimed", task=12, devices="0,1", note="two words"))
    assert text == '2026-03-02T09:00:00Z INFO    claimed task=12 devices=0,1 note="two words"'
    line = json.loads(cli.Formatter(as_json=True, context={"pool_id": 3}).format(record("claimed", task=12)))
    expected = {
        "at": "2026-03-02T09:00:00.000Z",
        "level": "info",
        "logger": "klique.worker",
        "event": "claimed",
    }
    assert line == expected | {"pool_id": 3, "task_id": 12}


def test_the_daemon_imports_no_django():
    code = (
        "import sys, klique.worker.cli\nprint([m for m in sys.modules if m.startswith(('django', 'apps.'))])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
