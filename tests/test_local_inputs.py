"""Every local input through one reader (issue 67): a device, a FIFO, a socket, a 5,000-character path
or a link loop named as a recipe, a config, a model folder or a prompt file is a coded usage error
naming the path, at once: never a read until memory runs out, an open() that blocks, a traceback."""
from __future__ import annotations

import os
import socket

import pytest

from surgery.text.diagnostics import SurgeryError
from surgery.text.localfile import exists, read_file_bytes, read_text_file

from testpaths import E2B, E2B_ASSISTANT


def _code(fn, *args):
    with pytest.raises(SurgeryError) as ei:
        fn(*args)
    return ei.value.diagnostics[0]


@pytest.fixture
def odd(tmp_path):
    """name -> a path that is no regular file (or cannot be looked up)."""
    fifo = tmp_path / "recipe.fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    yield {"fifo": fifo, "device": "/dev/zero", "device-link": zero, "socket": sock_path, "loop": loop,
           "long": tmp_path / ("x" * 5000), "nul": "a\x00b.yaml"}
    sock.close()


EXPECTED = {"fifo": "SRG780", "device": "SRG780", "device-link": "SRG780", "socket": "SRG780", "loop": "SRG781",
            "long": "SRG781", "nul": "SRG781"}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_the_reader_refuses_what_is_no_regular_file(odd, kind):
    d = _code(read_text_file, odd[kind], 1 << 20, "recipe")
    assert d.code == EXPECTED[kind], d.message
    assert len(d.message) < 1000  # the 5,000-character path is cut


def test_a_file_that_says_zero_bytes_is_still_bounded(tmp_path):
    """/proc files report size 0 and /dev/zero is refused before the read; a file growing past the
    limit is counted as read (the size fstat gave is not trusted)."""
    d = _code(read_file_bytes, "/proc/self/status", 16, "config")
    assert d.code == "SRG008"


@pytest.mark.parametrize("kind", sorted(EXPECTED))
@pytest.mark.parametrize("as_what", ["recipe", "target"])
def test_the_cli_gives_a_usage_error_for_each(run_cli, odd, kind, as_what):
    path = odd[kind]
    if as_what == "recipe":
        rc, out, err = run_cli("validate", path, "--target", E2B,
                               "--draft", E2B_ASSISTANT)
    else:
        rc, out, err = run_cli("validate", "eagle3", "--target", path, "--draft", path)
    assert rc == 2, err
    assert "Traceback" not in err
    expected = "SRG001" if (kind, as_what) == ("nul", "target") else EXPECTED[kind]  # no file can be there
    assert expected in err, err
    assert "\x1b" not in err and len(err) < 20_000


def test_a_prompt_file_that_is_a_fifo_is_refused(odd):
    from surgery.commands.probe import read_prompts

    with pytest.raises(SurgeryError) as ei:
        read_prompts(str(odd["fifo"]))
    assert ei.value.diagnostics[0].code == "SRG780"


def test_exists_never_raises_oserror(odd):
    assert exists(odd["fifo"]) and exists(odd["device-link"])
    assert not exists(odd["nul"])  # no file can be there; reading it is SRG781
    for kind in ("long", "loop"):
        assert _code(exists, odd[kind]).code == "SRG781"
