# Sourced first by the scripts that need root (demo.sh, test.sh,
# install-deps.sh): as root it does nothing; otherwise it runs the script
# again through sudo, or says in one line that it needs root. So the README's
# `bash scripts/demo.sh` works as root on a fresh machine, which has no
# sudo, and as a user with sudo alike.
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    exec sudo -- bash "$0" "$@"
  fi
  echo "$(basename "$0"): needs root: run it as root (sudo is not installed)" >&2
  exit 1
fi
