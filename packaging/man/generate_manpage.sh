#!/usr/bin/env bash
# Generates the man page mismatch.1 (roff) from the help of `mismatch` and of every subcommand, walked by
# ../completions/help_tree.sh, so that the page lists exactly the commands and options the program has.
# usage: generate_manpage.sh PATH_TO_MISMATCH|HELP_TREE.tsv VERSION OUT_FILE
set -euo pipefail
exe="${1:?usage: generate_manpage.sh PATH_TO_MISMATCH VERSION OUT_FILE}"
version="${2:?usage: generate_manpage.sh PATH_TO_MISMATCH VERSION OUT_FILE}"
out="${3:?usage: generate_manpage.sh PATH_TO_MISMATCH VERSION OUT_FILE}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tree="$(mktemp)"
trap 'rm -f "$tree" "$out.tmp"' EXIT
# A help tree already written by help_tree.sh (a .tsv file; the build makes it once for both generators), or the
# program to walk.
if [[ "$exe" == *.tsv ]]; then
  cp "$exe" "$tree"
else
  "$here/../completions/help_tree.sh" "$exe" > "$tree"
fi

awk -F'\t' -v version="$version" '
  # roff text: backslashes printed literally, hyphens as minus signs (so that options can be searched and
  # copied), and a line must not start with a control character
  function roff(s) { gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s); if (s ~ /^[.'\'']/) s = "\\&" s; return s }
  function optionhead(names, type, choices, flags,   n, parts, i, s) {
    n = split(names, parts, " "); s = ""
    for (i = 1; i <= n; i++) s = s (i > 1 ? ", " : "") "\\fB" roff(parts[i]) "\\fR"
    if (type != "") s = s " \\fI" roff(type) "\\fR"
    if (flags ~ /M/) s = s " ..."
    return s
  }
  $1 == "C" { paths[++npaths] = $2; desc[$2] = $3 }
  $1 == "U" { usage[$2] = $3 }
  $1 == "S" { nsub[$2]++; subname[$2, nsub[$2]] = $3 }
  $1 == "O" { opt[$2, ++nopt[$2]] = $0 }
  $1 == "P" { pos[$2, ++npos[$2]] = $0 }
  function options(p, skiphelp,   i, fld, extra) {
    for (i = 1; i <= npos[p]; i++) {
      split(pos[p, i], fld, "\t")
      print ".TP"
      print "\\fI" roff(fld[3]) "\\fR" (fld[5] ? " (required)" : "")
      print roff(fld[6])
    }
    for (i = 1; i <= nopt[p]; i++) {
      split(opt[p, i], fld, "\t")
      if (skiphelp && fld[3] == "-h --help") continue
      extra = ""
      if (fld[5] != "") { extra = " One of: " fld[5]; gsub(/,/, ", ", extra); extra = extra "." }
      if (fld[6] ~ /R/) extra = extra " Required."
      print ".TP"
      print optionhead(fld[3], fld[4], fld[5], fld[6])
      print roff(fld[7] extra)
    }
  }
  END {
    print ".\\\" Generated from `mismatch --help` (every subcommand) by packaging/man/generate_manpage.sh."
    print ".TH MISMATCH 1 \"\" \"mismatch " version "\" \"User Commands\""
    print ".SH NAME"
    print "mismatch \\- measure training\\-inference mismatch for on\\-policy distillation"
    print ".SH SYNOPSIS"
    print ".B mismatch"
    print "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fICOMMAND OPTIONS\\fR]"
    print ".SH DESCRIPTION"
    print roff(desc["mismatch"])
    print ".PP"
    print "\\fBmismatch\\fR is the headless front\\-end of Mismatch Lab; the graphical one is \\fBmismatch\\-lab\\fR."
    print "Results go to standard output (a table, or JSON with \\fB\\-\\-json\\fR), progress to standard error."
    print "The program options below are also accepted after a command."
    print ".SH OPTIONS"
    options("mismatch", 0)
    print ".SH COMMANDS"
    for (i = 2; i <= npaths; i++) {
      p = paths[i]
      print ".SS \"" roff(p) "\""
      u = usage[p]; sub(/^mismatch /, "", u)
      print ".B mismatch"
      print roff(u)
      print ".PP"
      print roff(desc[p])
      if (nsub[p] > 0) {
        s = ""
        for (j = 1; j <= nsub[p]; j++) s = s (j > 1 ? ", " : "") "\\fB" roff(p " " subname[p, j]) "\\fR"
        print ".PP"
        print "Commands: " s "."
      }
      options(p, 1)
    }
    print ".SH ENVIRONMENT"
    print ".TP"
    print ".B MISMATCH_WORKSPACE"
    print "Workspace directory used when \\fB\\-\\-workspace\\fR is not given (default: \\fI$XDG_DATA_HOME/mismatch\\-lab/default\\fR, or \\fI~/.local/share/mismatch\\-lab/default\\fR)."
    print ".TP"
    print ".B MISMATCH_RESOURCE_DIR"
    print "Directory of the built\\-in demo models, prompt sets and recipes, instead of the installed one."
    print ".SH FILES"
    print ".TP"
    print ".I /usr/share/mismatch\\-lab/resources"
    print "The built\\-in demo models (\\fImodels/\\fR), prompt sets (\\fIprompts/\\fR) and precision recipes (\\fIrecipes/\\fR), found relative to the program (\\fI../share/mismatch\\-lab/resources\\fR)."
    print ".TP"
    print ".I workspace.db"
    print "The run store (SQLite) inside the workspace directory."
    print ".SH EXAMPLES"
    print "Create a workspace with the built\\-in demo models and prompt sets and show what it holds:"
    print ".PP"
    print ".RS"
    print "mismatch \\-\\-workspace /tmp/lab demo"
    print ".RE"
  }' "$tree" > "$out.tmp"
mv "$out.tmp" "$out"
