#!/bin/sh
# Plots test accuracy against time, one curve per node, from a merged metrics.csv (gridnode demo writes one;
# so do nodes run with metrics.csv set, one file each, which concatenate less their headers).
#
#   scripts/plot-metrics.sh METRICS_CSV [OUT_PNG]     (OUT_PNG defaults to accuracy.png beside the CSV)
#
# Columns: time_s,node,epoch,samples,samples_per_s,loss,test_accuracy,tau,rounds. Needs gnuplot (gnuplot-nox).
set -eu
csv=${1:?usage: plot-metrics.sh METRICS_CSV [OUT_PNG]}
out=${2:-$(dirname "$csv")/accuracy.png}
nodes=$(tail -n +2 "$csv" | cut -d, -f2 | sort -u)
[ -n "$nodes" ] || { echo "error: $csv has no rows" >&2; exit 2; }
plot=""
for n in $nodes; do
  # One curve per node: gnuplot filters the rows of node $n (string compare on column 2).
  plot="$plot${plot:+, }'$csv' using 1:(strcol(2) eq '$n' ? \$7 : NaN) skip 1 with linespoints title 'node $n'"
done
gnuplot <<GP
set terminal pngcairo size 900,560
set output '$out'
set datafile separator ','
set title 'test accuracy per node'
set xlabel 'time since the node started training (s)'
set ylabel 'test accuracy'
set key bottom right
set grid
plot $plot
GP
echo "wrote $out"
