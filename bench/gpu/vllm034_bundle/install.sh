#!/usr/bin/env bash
# install.sh (vLLM 0.34 bundle): on the H200 machine, after every part folder was copied into /tmp/vbundle:
# joins the pieces of each archive, checks them, unpacks them into /tmp/site, checks the
# requirements and prints vLLM's version.  Afterwards, in the same shell:  . /tmp/vbundle/env.sh
set -uo pipefail
VB=${VB:-/tmp/vbundle}
SITE=${SITE:-/tmp/site}
mkdir -p "$SITE"
fail() { echo "install.sh: $*" >&2; return 1 2>/dev/null || exit 1; }
cd "$VB" || fail "no $VB"
# join the pieces (NAME.tar.xz.00, .01, ...) back into NAME.tar.xz
for first in *.tar.xz.00; do
  [ -e "$first" ] || continue
  name=${first%.00}
  cat "$name".[0-9][0-9] > "$name" && rm -f "$name".[0-9][0-9]
done
[ -f SHA256SUMS ] || fail "SHA256SUMS missing (part p1 not copied?)"
missing=$(awk '{print $2}' SHA256SUMS | while read -r f; do [ -f "$f" ] || echo "$f"; done)
[ -z "$missing" ] || fail "archives missing: $missing (a part was not copied, or /tmp was lost between calls)"
sha256sum -c --quiet SHA256SUMS || fail "checksum mismatch"
n=0
pids=""
for f in *.tar.xz; do   # the five archives unpack side by side (one xz thread each)
  tar -C "$SITE" -xJf "$f" & pids="$pids $!"
  n=$((n + 1))
done
for p in $pids; do wait "$p" || fail "an archive failed to unpack"; done
rm -f *.tar.xz
echo "install.sh: unpacked $n archives into $SITE ($(du -sh "$SITE" | cut -f1))"
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} VLLM_USE_FLASHINFER_SAMPLER=0 LD_LIBRARY_PATH=$SITE/nvidia/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# requirement check of the bundled distributions against what is importable now
python3 - "$SITE" <<'EOF'
import sys, importlib.metadata as md
from packaging.requirements import Requirement
site = sys.argv[1]
bad = []
for d in md.distributions(path=[site]):
    if d.metadata["Name"] == "vllm":  # its requirement list is deliberately cut down (README)
        continue
    for r in d.requires or []:
        req = Requirement(r)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            v = md.version(req.name)
        except md.PackageNotFoundError:
            v = None
        if v is None or (req.specifier and not req.specifier.contains(v, prereleases=True)):
            bad.append(f"{d.metadata['Name']} needs {req} (have {v})")
print("install.sh: requirement check:", "all satisfied" if not bad else "")
for b in sorted(set(bad)):
    print("   unsatisfied:", b)
EOF
python3 -c "import importlib.metadata as md, torch, vllm, jsonschema; print(\"vllm\", vllm.__version__, \"from\", vllm.__file__, \"| torch\", torch.__version__, torch.__file__, \"| jsonschema\", md.version(\"jsonschema\"))"
