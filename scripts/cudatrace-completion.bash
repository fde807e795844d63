# bash completion for cudatrace (installed as
# share/bash-completion/completions/cudatrace). tests/scripts/options_sync_test.py
# keeps the option and group lists equal to --help's.
_cudatrace() {
  local cur prev
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  local opts="--pid --all-processes --lib --filter --layer --min-us --errors --tid --json --output --perfetto
    --output-follow-symlinks --full-names --stack --py-stack --prometheus --otlp --otlp-all-calls --otlp-interval --nvtx --by-range --by-span --write-nvtx-library --summary --hist --insights --gpu-time --interval --count --ring-mb --buffer-mb
    --dlopen-stop --no-dlopen-stop --max-overhead --attach --no-otel --every-layer --empty-probes --help --list-apis --verbose --version"
  local report_opts="--filter --layer --json --perfetto --output-follow-symlinks --full-names --summary --hist --insights --gpu-time --by-span --help"
  local groups="mem xfer launch stream event device coll module query nvtx info error graph occupancy texture interop other all"

  # After "--" the words belong to the traced command.
  local i
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [[ "${COMP_WORDS[i]}" == "--" ]]; then
      _command_offset $((i + 1)) 2>/dev/null
      return
    fi
  done

  case "$prev" in
    -p|--pid)
      COMPREPLY=($(compgen -W "$(ls /proc | grep -E '^[0-9]+$')" -- "$cur"))
      return ;;
    -f|--filter)
      COMPREPLY=($(compgen -W "$groups" -- "${cur##*,}"))
      [[ "$cur" == *,* ]] && COMPREPLY=("${COMPREPLY[@]/#/${cur%,*},}")
      return ;;
    --layer)
      COMPREPLY=($(compgen -W "runtime driver nccl all" -- "$cur"))
      return ;;
    --attach)
      COMPREPLY=($(compgen -W "auto multi perf" -- "$cur"))
      return ;;
    -o|--output|--perfetto|--lib)
      COMPREPLY=($(compgen -f -- "$cur"))
      return ;;
    --min-us|--tid|-i|--interval|-c|--count|--ring-mb|--prometheus|--otlp|--otlp-interval|--max-overhead)
      return ;;
  esac

  if [[ "${COMP_WORDS[1]}" == "report" ]]; then
    if [[ "$cur" == -* ]]; then
      COMPREPLY=($(compgen -W "$report_opts" -- "$cur"))
    else
      COMPREPLY=($(compgen -f -- "$cur"))
    fi
    return
  fi
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "report" -- "$cur") $(compgen -c -- "$cur"))
  else
    COMPREPLY=($(compgen -c -- "$cur"))
  fi
}
complete -F _cudatrace cudatrace
