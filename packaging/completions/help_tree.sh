#!/usr/bin/env bash
# Walks the CLI11 help of `mismatch` (`mismatch --help`, then `mismatch SUB --help` for every subcommand,
# recursively) and prints the command tree as tab-separated records, read by generate_completions.sh and
# ../man/generate_manpage.sh, so that the completions and the man page follow the CLI without hand edits:
#   C <path> <description>                                   a command ("mismatch", "mismatch store init")
#   U <path> <usage>                                         its usage line
#   S <path> <name> <description>                            a subcommand of path
#   P <path> <name> <type> <required 0|1> <description>      a positional argument, in order
#   O <path> <names> <type> <choices> <flags> <description>  an option: names space separated ("-w --workspace"),
#                                                            type empty for a flag, choices comma separated,
#                                                            flags R (required) and/or M (repeatable)
# usage: help_tree.sh PATH_TO_MISMATCH [OUT.tsv]   (stdout, or OUT.tsv written whole: temporary file + rename; the
# build writes it once and generate_completions.sh and ../man/generate_manpage.sh both read it)
set -euo pipefail
exe="${1:?usage: help_tree.sh PATH_TO_MISMATCH [OUT.tsv]}"
out="${2:-}"

parse() {  # parse PATH < help text
  awk -v path="$1" '
    function trim(s) { sub(/^ +/, "", s); sub(/ +$/, "", s); return s }
    function flush(   n, t, names, type, choices, flags, required, i, tok) {
      if (entry == "") return
      n = split(entry, t, " ")
      desc = trim(desc)
      if (section == "S") {
        print "S\t" path "\t" t[1] "\t" desc
      } else if (section == "P") {
        required = 0
        for (i = 3; i <= n; i++) if (t[i] == "REQUIRED") required = 1
        print "P\t" path "\t" t[1] "\t" (n >= 2 ? t[2] : "") "\t" required "\t" desc
      } else {
        names = t[1]; gsub(/,/, " ", names)
        type = ""; choices = ""; flags = ""
        for (i = 2; i <= n; i++) {
          tok = t[i]
          if (tok == "REQUIRED") { flags = flags "R"; continue }
          if (tok == "...") { flags = flags "M"; continue }
          # Excludes:/Needs: name other options; (Env:X) and "x N" annotate; none of them is a type
          if (tok ~ /:$/) { i = n; continue }
          if (tok ~ /^\(/ || tok == "x") continue
          if (i == 2) {
            if (match(tok, /\{[^}]*\}/)) choices = substr(tok, RSTART + 1, RLENGTH - 2)
            type = tok; sub(/[:=].*/, "", type)
          }
        }
        print "O\t" path "\t" names "\t" type "\t" choices "\t" flags "\t" desc
      }
      entry = ""; desc = ""
    }
    BEGIN { section = ""; entry = ""; desc = ""; head = ""; usage = "" }
    section == "" && !/^Usage:/ && usage == "" { head = head (head == "" ? "" : " ") trim($0); next }
    /^Usage: / { usage = substr($0, 8); next }
    /^[A-Za-z][A-Za-z0-9 _-]*:$/ {
      flush()
      h = tolower($0)
      section = (h == "subcommands:") ? "S" : (h == "positionals:") ? "P" : "O"
      next
    }
    /^  [^ ]/ && section != "" {
      flush()
      line = substr($0, 3)
      if (match(line, /  +/)) { entry = substr(line, 1, RSTART - 1); desc = substr(line, RSTART + RLENGTH) }
      # CLI11 pads the entry to column 30 (its default width): an entry of exactly 28 characters is followed
      # by a single space
      else if (length($0) > 30 && substr($0, 30, 1) == " ") { entry = trim(substr($0, 3, 27)); desc = substr($0, 31) }
      else { entry = trim(line); desc = "" }
      next
    }
    /^   +[^ ]/ && entry != "" { desc = desc " " trim($0); next }
    /^$/ { flush(); next }
    END {
      flush()
      print "C\t" path "\t" head
      print "U\t" path "\t" usage
    }'
}

walk() {  # walk WORDS...: the command path below the program
  local help
  help="$("$exe" "$@" --help)" || { echo "help_tree: '$exe $* --help' failed" >&2; exit 1; }
  local records
  records="$(printf '%s\n' "$help" | parse "$(echo mismatch "$@")")"
  [ -n "$records" ] || { echo "help_tree: no help parsed from '$exe $* --help'" >&2; exit 1; }
  printf '%s\n' "$records"
  local sub
  for sub in $(printf '%s\n' "$records" | awk -F'\t' '$1 == "S" { print $3 }'); do
    walk "$@" "$sub"
  done
}

if [ -n "$out" ]; then
  walk > "$out.tmp"
  mv "$out.tmp" "$out"
else
  walk
fi
