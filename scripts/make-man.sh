#!/bin/sh
# Writes gridnode's man page (roff) from its own --help texts, so that the page never drifts from the binary:
#   scripts/make-man.sh GRIDNODE OUT.1
# Sections: NAME and SYNOPSIS, each subcommand's --help verbatim, the exit codes and the files the package puts
# in place. The build runs it (the package's gridnode.1.gz).
set -eu
gridnode=${1:?usage: make-man.sh GRIDNODE OUT.1}
out=${2:?usage: make-man.sh GRIDNODE OUT.1}

# Help text as roff: backslashes escaped, lines that start with . or ' kept literal, in a no-fill block.
verbatim() {
  echo ".nf"
  sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
  echo ".fi"
}

version=$("$gridnode" --version | awk '{print $NF}')
commands=$("$gridnode" --help | awk '/^Subcommands:/ {on = 1; next} on && NF {print $1}')
{
  echo ".TH GRIDNODE 1 \"\" \"gridtrain $version\" \"User Commands\""
  echo ".SH NAME"
  printf '%s\n' 'gridnode \- one node of a gridtrain cluster (elastic, grid-structured training)'
  echo ".SH SYNOPSIS"
  echo ".B gridnode"
  printf '%s\n' '\fICOMMAND\fR [\fIOPTIONS\fR]'
  echo ".SH DESCRIPTION"
  echo "One gridnode runs per machine. Nodes arrange themselves in a d-dimensional grid and average their"
  echo "parameters along its lines while each trains its own learner; they join and leave at any time."
  echo ".PP"
  "$gridnode" --help | verbatim
  echo ".SH COMMANDS"
  for c in $commands; do
    echo ".SS \"gridnode $c\""
    "$gridnode" "$c" --help | verbatim
  done
  echo ".SH EXIT STATUS"
  echo ".TP"
  echo "0"
  echo "success"
  echo ".TP"
  echo "1"
  echo "internal error"
  echo ".TP"
  echo "2"
  echo "bad input: config, command line, data file"
  echo ".TP"
  echo "3"
  echo "rejected by the cluster: another model, protocol, token or TLS certificate"
  echo ".PP"
  printf '%s\n' 'Errors go to standard error, one line each, starting with \fBerror:\fR.'
  echo ".SH FILES"
  echo ".TP"
  echo "/etc/gridtrain/cluster.yaml"
  echo "the cluster's config (the same on every machine)"
  echo ".TP"
  echo "/etc/gridtrain/node.env"
  echo "this machine's address and the cluster's machines, written by /usr/lib/gridtrain/gridtrain-boot"
  echo ".TP"
  echo "/etc/gridtrain/token"
  echo "the cluster token (cluster.token_file)"
  echo ".TP"
  echo "/var/lib/gridtrain"
  echo "checkpoints"
  echo ".SH SEE ALSO"
  echo "systemctl(8): the units gridnode.service and gridtrain-spot-watch.service"
} > "$out"
