"""A wheel's own requirements (its METADATA's Requires-Dist, extras left out, markers kept for pip), one per
line, for the oracle venvs that install the wheel --no-deps beside a torch this disk holds
(scripts/oracle_venv.sh, scripts/sglang_oracle_venv.sh).

    python scripts/wheel_requirements.py WHEEL [--skip NAME ...] [--until NAME]

--skip: names left out (torch and its companions always are); --until: stop after this name (vLLM's list
ends its pure-Python part at numba; the CUDA kernel packages follow it)."""
import argparse
import zipfile

ALWAYS_SKIPPED = {"torch", "torchvision", "torchaudio", "torchcodec"}


def requirement_name(req: str) -> str:
    return req.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0].split("!")[0].strip().lower()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel")
    ap.add_argument("--skip", nargs="*", default=[])
    ap.add_argument("--until")
    args = ap.parse_args()
    skip = ALWAYS_SKIPPED | set(args.skip)
    z = zipfile.ZipFile(args.wheel)
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if not line.startswith("Requires-Dist:") or "extra ==" in line:
            continue
        req = line.split(":", 1)[1].strip()
        name = requirement_name(req)
        if name in skip:
            continue
        print(req)
        if name == args.until:
            break


if __name__ == "__main__":
    main()
