#!/usr/bin/env bash
# Generates the bash and zsh completions of `mismatch` from its help (help_tree.sh walks every subcommand),
# so that a new subcommand or option is completed without editing anything here.
# usage: generate_completions.sh PATH_TO_MISMATCH|HELP_TREE.tsv OUT_DIR   (writes OUT_DIR/mismatch and OUT_DIR/_mismatch)
set -euo pipefail
exe="${1:?usage: generate_completions.sh PATH_TO_MISMATCH OUT_DIR}"
out="${2:?usage: generate_completions.sh PATH_TO_MISMATCH OUT_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"
tree="$(mktemp)"
trap 'rm -f "$tree" "$out/mismatch.tmp" "$out/_mismatch.tmp"' EXIT
# A help tree already written by help_tree.sh (a .tsv file; the build makes it once for both generators), or the
# program to walk.
if [[ "$exe" == *.tsv ]]; then
  cp "$exe" "$tree"
else
  "$here/help_tree.sh" "$exe" > "$tree"
fi

# What an option's value or a positional completes to: "flag" (no value), "words:a b c" (a choice list),
# "dir", "file", or "any" (free text or a number: nothing to complete).
kind_awk='
  function kind(name, type, choices,   w) {
    if (choices != "") { w = choices; gsub(/,/, " ", w); return "words:" w }
    if (type == "") return "flag"
    if (type ~ /DIR$/ || name ~ /(^|[-_])dir$/) return "dir"
    if (type ~ /^(TEXT|INT|UINT|FLOAT|NUMBER|SIZE|SIGMA|BOOLEAN|ENUM)$/) return "any"
    return "file"
  }
  function sub_path(p) { sub(/^mismatch ?/, "", p); return p }
'

# ---------------------------------------------------------------- bash
awk -F'\t' "$kind_awk"'
  $1 == "S" { subs[sub_path($2)] = subs[sub_path($2)] (subs[sub_path($2)] == "" ? "" : " ") $3 }
  $1 == "C" { paths[++npaths] = sub_path($2) }
  $1 == "O" {
    p = sub_path($2); n = split($3, names, " ")
    for (i = 1; i <= n; i++) {
      opts[p] = opts[p] (opts[p] == "" ? "" : " ") names[i]
      k = kind(names[i], $4, $5)
      if (k != "flag") values[++nvalues] = "        \"" p "|" names[i] "\") echo \"" k "\" ;;"
    }
  }
  $1 == "P" { p = sub_path($2); positionals[++npositionals] = "        \"" p "|" (npos[p]++) "\") echo \"" kind(tolower($3), $4, "") "\" ;;" }
  END {
    print "# bash completion for mismatch                             -*- shell-script -*-"
    print "# Generated from `mismatch --help` (every subcommand) by packaging/completions/generate_completions.sh."
    print ""
    print "# _mismatch_subcommands PATH: the subcommands of a command path (\"\" is the program, \"store\" its store command)"
    print "_mismatch_subcommands() {"
    print "    case \"$1\" in"
    for (i = 1; i <= npaths; i++) if (paths[i] in subs) print "        \"" paths[i] "\") echo \"" subs[paths[i]] "\" ;;"
    print "    esac"
    print "}"
    print ""
    print "# _mismatch_options PATH: the options of a command path itself"
    print "_mismatch_options() {"
    print "    case \"$1\" in"
    for (i = 1; i <= npaths; i++) print "        \"" paths[i] "\") echo \"" opts[paths[i]] "\" ;;"
    print "    esac"
    print "}"
    print ""
    print "# _mismatch_option_value PATH OPTION: flag, dir, file, any, or words:LIST (the option value of a command path"
    print "# itself; the caller walks up to the parents, whose options the CLI also accepts after a subcommand)"
    print "_mismatch_option_value() {"
    print "    case \"$1|$2\" in"
    for (i = 1; i <= nvalues; i++) print values[i]
    print "        *) echo flag ;;"
    print "    esac"
    print "}"
    print ""
    print "# _mismatch_positional PATH INDEX: what the INDEXth positional argument (from 0) of a command path is"
    print "_mismatch_positional() {"
    print "    case \"$1|$2\" in"
    for (i = 1; i <= npositionals; i++) print positionals[i]
    print "        *) echo none ;;"
    print "    esac"
    print "}"
  }' "$tree" > "$out/mismatch.tmp"
cat >> "$out/mismatch.tmp" <<'BASH'

# _mismatch_value_kind PATH OPTION: the option's value kind, looking in PATH and then in its parents
_mismatch_value_kind() {
    local path="$1" kind
    while :; do
        kind=$(_mismatch_option_value "$path" "$2")
        if [[ $kind != flag || -z $path ]]; then
            echo "$kind"
            return
        fi
        if [[ $path == *" "* ]]; then path=${path% *}; else path=""; fi
    done
}

# _mismatch_all_options PATH: the options of PATH and of its parents
_mismatch_all_options() {
    local path="$1" all=""
    while :; do
        all="$all $(_mismatch_options "$path")"
        [[ -z $path ]] && break
        if [[ $path == *" "* ]]; then path=${path% *}; else path=""; fi
    done
    echo "$all"
}

_mismatch_reply_kind() {  # _mismatch_reply_kind KIND CURRENT_WORD
    case "$1" in
        words:*) mapfile -t COMPREPLY < <(compgen -W "${1#words:}" -- "$2") ;;
        dir) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -d -- "$2") ;;
        file) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$2") ;;
        *) COMPREPLY=() ;;
    esac
}

_mismatch() {
    local cword=$COMP_CWORD cur=${COMP_WORDS[COMP_CWORD]} path="" word kind i positional=0
    COMPREPLY=()
    # Walk the words before the cursor: subcommands extend the path, options skip their value
    # ("--out=FILE" arrives as three words, "--out" "=" "FILE", since "=" breaks words in bash).
    for ((i = 1; i < cword; i++)); do
        word=${COMP_WORDS[i]}
        if [[ $word == -* ]]; then
            kind=$(_mismatch_value_kind "$path" "$word")
            if [[ $kind != flag ]]; then
                ((i++))
                if [[ ${COMP_WORDS[i]} == "=" ]]; then ((i++)); fi
            fi
            continue
        fi
        if [[ " $(_mismatch_subcommands "$path") " == *" $word "* ]]; then
            path="${path:+$path }$word"
            positional=0
        else
            ((positional++))
        fi
    done
    # The value of an option: "--out FILE", "--out=FILE", "--out="
    local option=""
    if [[ $cur == "=" ]]; then
        option=${COMP_WORDS[cword - 1]}
        cur=""
    elif ((cword >= 2)) && [[ ${COMP_WORDS[cword - 1]} == "=" ]]; then
        option=${COMP_WORDS[cword - 2]}
    elif ((cword >= 1)); then
        option=${COMP_WORDS[cword - 1]}
    fi
    if [[ $option == -* ]]; then
        kind=$(_mismatch_value_kind "$path" "$option")
        if [[ $kind != flag ]]; then
            _mismatch_reply_kind "$kind" "$cur"
            return 0
        fi
    fi
    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_mismatch_all_options "$path")" -- "$cur")
        return 0
    fi
    local subcommands
    subcommands=$(_mismatch_subcommands "$path")
    if [[ -n $subcommands ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$subcommands" -- "$cur")
        return 0
    fi
    _mismatch_reply_kind "$(_mismatch_positional "$path" "$positional")" "$cur"
    return 0
}
complete -F _mismatch mismatch
BASH
bash -n "$out/mismatch.tmp"

# ---------------------------------------------------------------- zsh
awk -F'\t' "$kind_awk"'
  function fname(p) { p = (p == "" ? "mismatch" : "mismatch_" p); gsub(/[^A-Za-z0-9]/, "_", p); return p }
  # A description for a completion menu: the first sentence, at most 80 characters, quoted for zsh
  function short(d) {
    if (match(d, /\. /)) d = substr(d, 1, RSTART - 1)
    sub(/\.$/, "", d)
    if (length(d) > 80) d = substr(d, 1, 77) "..."
    return d
  }
  function q(s) { gsub(/'\''/, "'\''\\'\'''\''", s); return s }
  function bracket(s) { gsub(/\\/, "\\\\", s); gsub(/\[/, "\\[", s); gsub(/\]/, "\\]", s); return s }
  function action(k) {
    if (k ~ /^words:/) return "(" substr(k, 7) ")"
    if (k == "dir") return "_files -/"
    if (k == "file") return "_files"
    return " "
  }
  function optspecs(p, global,   i, n, names, k, j, excl, s, out, line, fld) {
    out = ""
    for (i = 1; i <= nopt[p]; i++) {
      line = optline[p, i]; split(line, fld, "\t")
      if (global && fld[3] ~ /(^| )(-h|--help|--version)( |$)/) continue
      n = split(fld[3], names, " ")
      k = kind(names[n], fld[4], fld[5])
      excl = (fld[6] ~ /M/) ? "*" : "(" fld[3] ")"
      for (j = 1; j <= n; j++) {
        s = excl names[j] "[" bracket(short(fld[7])) "]"
        if (k != "flag") s = s ":" (fld[4] == "" ? "value" : fld[4]) ":" action(k)
        out = out "    '\''" q(s) "'\'' \\\n"
      }
    }
    return out
  }
  $1 == "C" { p = sub_path($2); paths[++npaths] = p }
  $1 == "S" { p = sub_path($2); nsub[p]++; subname[p, nsub[p]] = $3; subdesc[p, nsub[p]] = $4 }
  $1 == "O" { p = sub_path($2); optline[p, ++nopt[p]] = $0 }
  $1 == "P" { p = sub_path($2); npos[p]++; posname[p, npos[p]] = $3; poskind[p, npos[p]] = kind(tolower($3), $4, ""); posreq[p, npos[p]] = $5 }
  END {
    print "#compdef mismatch"
    print "# zsh completion for mismatch."
    print "# Generated from `mismatch --help` (every subcommand) by packaging/completions/generate_completions.sh."
    print ""
    for (i = 1; i <= npaths; i++) {
      p = paths[i]; f = fname(p)
      if (nsub[p] > 0) {
        print "_" f "_commands() {"
        print "    local -a commands"
        print "    commands=("
        for (j = 1; j <= nsub[p]; j++) print "        '\''" q(subname[p, j]) ":" q(short(subdesc[p, j])) "'\''"
        print "    )"
        print "    _describe -t commands '\''mismatch" (p == "" ? "" : " " p) " command'\'' commands"
        print "}"
        print ""
      }
      print "_" f "() {"
      print "    local curcontext=\"$curcontext\" state line"
      print "    typeset -A opt_args"
      print "    _arguments -C -s \\"
      printf "%s", optspecs(p, 0)
      # The CLI accepts the program options after a subcommand too (fallthrough)
      if (p != "") printf "%s", optspecs("", 1)
      if (nsub[p] > 0) {
        print "    '\''1: :_" f "_commands'\'' \\"
        print "    '\''*:: :->subcommand'\'' && return"
        print "    case $state in"
        print "        subcommand)"
        print "            curcontext=\"${curcontext%:*:*}:mismatch-$words[1]:\""
        print "            case $words[1] in"
        for (j = 1; j <= nsub[p]; j++) print "                " subname[p, j] ") _" fname((p == "" ? "" : p " ") subname[p, j]) " ;;"
        print "            esac"
        print "            ;;"
        print "    esac"
      } else {
        for (j = 1; j <= npos[p]; j++) print "    '\''" (posreq[p, j] ? "" : ":") j ":" q(posname[p, j]) ":" q(action(poskind[p, j])) "'\'' \\"
        print "    && return"
      }
      print "}"
      print ""
    }
    print "_mismatch \"$@\""
  }' "$tree" > "$out/_mismatch.tmp"
if command -v zsh >/dev/null 2>&1; then zsh -n "$out/_mismatch.tmp"; fi

mv "$out/mismatch.tmp" "$out/mismatch"
mv "$out/_mismatch.tmp" "$out/_mismatch"
