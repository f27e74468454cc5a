# The venv builders' shared steps: sourced, never run, by scripts/oracle_venv.sh (vLLM release oracles),
# scripts/sglang_oracle_venv.sh (the SGLang release oracle) and scripts/hf_venv.sh (the HF-transformers
# test venv), each as `. scripts/venv_lib.sh` once it has done its `cd` to the checkout's root and set DIR and
# STAMP (sourced there, not above, so the lines before keep their numbers in bash's own messages).
# A builder keeps its own usage, recipe table, DIR (the venv), STAMP (the recipe it builds), cache folder,
# install steps and import check; it calls these in this order, from the checkout's root, under
# `set -euo pipefail` (which they rely on: a failing step fails the builder):
#   venv_cached LABEL            the venv is kept while DIR/.stamp equals STAMP and DIR/bin/python is there:
#                                prints "LABEL: cached (DIR)" and exits the builder with 0
#   venv_fresh FOLDER            removes DIR, makes FOLDER (the builder's cache), makes the venv in DIR with
#                                $PYTHON (default python3), and turns off pip's version check
#   pip_ ARGS...                 DIR's pip with its "WARNING: Location" noise filtered out; the filter never
#                                fails (grep exits 1 when it prints nothing), so the status is pip's
#   venv_wheel FOLDER NAME VER   (the two oracle builders, which install a release's wheel --no-deps) sets
#                                WHEEL to FOLDER/NAME-VER-*.whl, downloading it there first when there is none
#   venv_stamp                   writes STAMP to DIR/.stamp: last, once the venv has passed its import check

venv_cached() {  # LABEL
  if [ -f "$DIR/.stamp" ] && [ "$(cat "$DIR/.stamp")" = "$STAMP" ] && [ -x "$DIR/bin/python" ]; then
    echo "$1: cached ($DIR)"; exit 0
  fi
}

venv_fresh() {  # FOLDER
  rm -rf "$DIR"
  mkdir -p "$1"
  local py=${PYTHON:-python3}
  "$py" -m venv "$DIR"
  export PIP_DISABLE_PIP_VERSION_CHECK=1
}

pip_() { "$DIR/bin/pip" "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }; }

venv_wheel() {  # FOLDER NAME VER
  WHEEL=$(ls "$1/$2-$3"-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$WHEEL" ]; then
    pip_ download -q --no-deps -d "$1" "$2==$3"
    WHEEL=$(ls "$1/$2-$3"-*.whl | head -1)
  fi
}

venv_stamp() { echo "$STAMP" > "$DIR/.stamp"; }
