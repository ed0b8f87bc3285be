"""The command line without a server: help, flags, config mistakes and exit codes."""

from __future__ import annotations

import signal
import socket
import stat
import time

import pytest
import yaml

import paddlectl
from paddlecloud_client.errors import EXIT_CODES
from paddlectl.commands import COMMANDS

from .conftest import datacenter_entry


@pytest.mark.parametrize("args", [(), ("help",), ("--help",), ("-h",), ("-help",)])
def test_help_lists_every_command_exit_codes_and_the_config(cli, args):
    result = cli(*args)
    assert (result.returncode, result.stderr) == (0, "")
    text = result.stdout
    assert text.startswith("Usage: paddlectl <flags> <subcommand> <subcommand args>\n\n"
                           "Subcommands:\n")
    main, pfs = text.split("Subcommands:\n")[1].split("\nSubcommands for PFS:\n")
    listed = lambda block: [line.split()[0] for line in block.split("\n\n")[0].splitlines()]  # noqa: E731
    assert listed(pfs) == ["cp", "ls", "mkdir", "rm"]
    assert set(listed(main)) | set(listed(pfs)) == set(COMMANDS)
    assert "\tsubmit           submit a job to PaddlePaddle Cloud\n" in text
    assert "not available yet" not in text
    for code, meaning in EXIT_CODES:
        assert f"\t{code:<4} {meaning}\n" in text
    assert "~/.paddle/config" in text and "PADDLE_CONFIG" in text
    assert 'Use "paddlectl flags" for a list of top-level flags' in text


def test_commands_prints_every_name(cli):
    result = cli("commands")
    assert result.stdout.splitlines() == sorted(COMMANDS)


def test_flags_lists_the_top_level_flags(cli):
    text = cli("flags").stdout
    for shown in ("--datacenter NAME", "--config PATH", "-o, --output FORMAT", "-q, --quiet",
                  "--version"):
        assert f"\t{shown}" in text


def test_help_of_one_command(cli):
    result = cli("help", "cp")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: paddlectl cp [-h] [-r] SRC [SRC ...] DEST")
    assert "-r, -R, --recursive" in result.stdout
    assert cli("cp", "--help").stdout == result.stdout
    assert cli("cp", "-help").stdout == result.stdout
    assert cli("-h", "cp").stdout == result.stdout
    rules = cli("help", "file").stdout
    assert "SRC must be inside the current directory" in rules
    assert "datacenters:\n\t  - name: datacenter1" in cli("help", "config").stdout


@pytest.mark.parametrize(("args", "message"), [
    (("frobnicate",), "paddlectl: unknown subcommand 'frobnicate' (`paddlectl help` lists "
                      "them)\n"),
    (("lss",), "paddlectl: unknown subcommand 'lss'; did you mean 'ls'? (`paddlectl help` "
               "lists them)\n"),
    (("--frobnicate", "ls"), "paddlectl: unknown flag --frobnicate (see `paddlectl flags`)\n"),
    (("ls", "--frobnicate"), "paddlectl: ls: unknown flag --frobnicate "
                             "(see `paddlectl help ls`)\n"),
    # a typo: the flag alone is named (not the package after it), and the flag it is close to
    (("submit", "-paralelism", "2", "examples/fit_a_line"),
     "paddlectl: submit: unknown flag -paralelism; did you mean -parallelism? "
     "(see `paddlectl help submit`)\n"),
    (("submit", "--jobname=x", "--cpus", "2", "pkg"),
     "paddlectl: submit: unknown flag --cpus; did you mean --cpu? "
     "(see `paddlectl help submit`)\n"),
    (("logs", "a", "b", "-1"), "paddlectl: logs: unrecognized arguments: b -1 "
                               "(see `paddlectl help logs`)\n"),  # -1: a value, no flag
    (("rm",), "paddlectl: rm: the following arguments are required: PATH "
              "(see `paddlectl help rm`)\n"),
    (("-o", "xml", "ls"), "paddlectl: argument -o/--output/-output: invalid choice: 'xml' "
                          "(choose from 'table', 'wide', 'json', 'yaml', 'csv') (see "
                          "`paddlectl flags`)\n"),
    (("--datacenter",), "paddlectl: argument --datacenter/-datacenter: expected one argument "
                        "(see `paddlectl flags`)\n"),
])
def test_usage_errors_exit_1_with_one_line(offline_cli, args, message):
    result = offline_cli(*args)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", message)


@pytest.mark.parametrize("flag", ["--version", "-version"])
def test_version_flag_is_the_client_version(cli, flag):
    result = cli(flag)
    assert (result.returncode, result.stdout, result.stderr) == (
        0, f"paddlectl {paddlectl.__version__}\n", "")


def test_missing_config_names_the_path(cli):
    result = cli("ls")
    assert result.returncode == 1
    assert result.stderr == (f"paddlectl: no config at {cli.config}: create it as in "
                             "`paddlectl help config`\n")


def test_the_config_flag_and_variable_choose_the_file(offline_cli, tmp_path):
    other = tmp_path / "elsewhere.yaml"
    for args, env in ((("--config", str(other)), {}), (("-config", str(other)), {}),
                      ((), {"PADDLE_CONFIG": str(other)})):
        result = offline_cli(*args, "config", "view", env=env)
        assert result.returncode == 1
        assert f"no config at {other}" in result.stderr


def test_an_unknown_datacenter_exits_1(offline_cli):
    offline_cli.write_config([datacenter_entry()], current="datacenter9")
    result = offline_cli("ls")
    assert result.returncode == 1
    assert result.stderr.startswith("paddlectl: current-datacenter: no datacenter named "
                                    "'datacenter9' in ")
    for flag in ("--datacenter", "-datacenter"):
        result = offline_cli(flag, "dc7", "ls")
        assert result.returncode == 1
        assert "--datacenter: no datacenter named 'dc7'" in result.stderr


def test_invalid_yaml_exits_1(offline_cli):
    offline_cli.write_config([], text="datacenters:\n  - name: [\n")
    result = offline_cli("ls")
    assert result.returncode == 1
    assert f"paddlectl: {offline_cli.config} is not valid YAML at line" in result.stderr


def test_unreachable_endpoint_exits_5_naming_it(offline_cli):
    endpoint = yaml.safe_load(offline_cli.config.read_text())["datacenters"][0]["endpoint"]
    result = offline_cli("ls")
    assert result.returncode == 5
    assert result.stderr == (f"paddlectl: cannot reach {endpoint}: connection refused; check "
                             f"`endpoint` of datacenter 'datacenter1' in {offline_cli.config}\n")
    version = offline_cli("version")
    assert version.returncode == 5
    assert version.stdout == f"paddlectl {paddlectl.__version__}\n"
    assert f"cannot reach {endpoint}: connection refused" in version.stderr


def test_unknown_host_exits_5(offline_cli):
    offline_cli.write_config([datacenter_entry(endpoint="http://no-such-host.invalid")])
    result = offline_cli("login")
    assert result.returncode == 5
    assert "cannot reach http://no-such-host.invalid: unknown host" in result.stderr


def test_a_config_others_can_read_is_warned_about_but_used(offline_cli):
    offline_cli.config.chmod(0o644)
    result = offline_cli("config", "view")
    assert result.returncode == 0
    assert result.stderr == (f"paddlectl: warning: {offline_cli.config} holds a password and "
                             f"is readable by others; run chmod 600 {offline_cli.config}\n")


def test_config_view_masks_passwords(offline_cli):
    entries = [datacenter_entry(), datacenter_entry("datacenter2", "bob", "hunter2")]
    offline_cli.write_config(entries)
    result = offline_cli("config", "view")
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stdout
    shown = yaml.safe_load(result.stdout)
    assert [dc["password"] for dc in shown["datacenters"]] == ["********", "********"]
    assert shown["datacenters"][1]["username"] == "bob"
    assert shown["current-datacenter"] == "datacenter1"
    table = offline_cli("config", "view", "-o", "table").stdout.splitlines()
    assert table[0].split() == ["CURRENT", "NAME", "USERNAME", "ENDPOINT"]
    assert table[1].split()[:3] == ["*", "datacenter1", "alice"]
    assert yaml.safe_load(offline_cli("-o", "json", "config", "view").stdout) == shown


def test_config_use_datacenter(offline_cli):
    offline_cli.write_config([datacenter_entry(), datacenter_entry("datacenter2")],
                             mode=0o644)
    before = offline_cli.config.read_text()
    result = offline_cli("config", "use-datacenter", "datacenter2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Current datacenter: datacenter2 (in {offline_cli.config})\n"
    assert offline_cli.config.read_text() == before.replace(
        "current-datacenter: datacenter1", "current-datacenter: datacenter2")
    assert stat.S_IMODE(offline_cli.config.stat().st_mode) == 0o600
    assert offline_cli("-q", "config", "use-datacenter", "datacenter1").stdout == ""
    unknown = offline_cli("config", "use-datacenter", "nope")
    assert unknown.returncode == 1
    assert "no datacenter named 'nope'" in unknown.stderr


@pytest.mark.parametrize("args", [
    ("ls", "data"), ("mkdir", "-p", "pfs/datacenter1/home/alice/x"), ("rm", "-r", "x"),
    ("cp", "a.txt", "b.txt"),
])
def test_relative_pfs_paths_are_refused_before_any_request(offline_cli, args):
    result = offline_cli(*args)
    assert result.returncode == 1  # not 5: nothing was sent to the unreachable endpoint
    assert "start with /pfs/" in result.stderr
    assert "/pfs/datacenter1/home/alice/" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("file", "../x", "/pfs/datacenter1/home/alice"), "src must be a child of the current "
                                                       "directory"),
    (("file", "data", "/pfs/datacenter1/home/bob"), "dest must be inside your home "
                                                    "/pfs/datacenter1/home/alice"),
    (("cp", "data", "/pfs/datacenter1/home/alice/"), "cp: data is a directory (use -r to "
                                                     "copy it)"),
    (("cp", "nope.txt", "/pfs/datacenter1/home/alice/"), "cp: nope.txt: no such file"),
])
def test_file_mistakes_are_found_before_any_request(offline_cli, args, message):
    (offline_cli.cwd / "data").mkdir()
    result = offline_cli(*args)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr


def test_ctrl_c_exits_130_quietly(offline_cli):
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        offline_cli.write_config([datacenter_entry(endpoint=endpoint)])
        process = offline_cli.start("ls")
        time.sleep(1.5)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    assert (process.returncode, stdout, stderr) == (130, "", "")


@pytest.fixture
def odd_server():
    """An HTTP server that is not a PaddleCloud portal: it answers every request with the
    status and body it is given."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answer = {"status": 502, "type": "text/html", "body": b"<h1>Bad Gateway</h1>"}

    class Handler(BaseHTTPRequestHandler):
        def respond(self):
            self.send_response(answer["status"])
            self.send_header("Content-Type", answer["type"])
            self.send_header("Content-Length", str(len(answer["body"])))
            self.end_headers()
            self.wfile.write(answer["body"])

        do_GET = do_POST = do_DELETE = respond

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.answer = answer
    server.url = f"http://127.0.0.1:{server.server_port}"
    yield server
    server.shutdown()


@pytest.mark.parametrize(("status", "content_type", "body", "code", "message"), [
    (502, "text/html", b"<h1>Bad Gateway</h1>", 4,
     "POST {url}/api/v1/auth/token/: 502 Bad Gateway"),
    (500, "application/json", b'{"code": "server_error", "message": "boom", "fields": {}}', 4,
     "boom"),
    (404, "text/html", b"nothing here", 3, "POST {url}/api/v1/auth/token/: 404 Not Found"),
    (403, "application/json", b'{"code": "x", "message": "not for you", "fields": {}}', 1,
     "not for you"),
])
def test_answers_become_exit_codes(offline_cli, odd_server, status, content_type, body, code,
                                   message):
    odd_server.answer.update(status=status, type=content_type, body=body)
    offline_cli.write_config([datacenter_entry(endpoint=odd_server.url)])
    result = offline_cli("login")
    assert (result.returncode, result.stdout) == (code, "")
    assert result.stderr == f"paddlectl: {message.format(url=odd_server.url)}\n"
