#!/bin/sh
# plot_claims.sh: claim time against queue size (10^4, 10^5, 10^6 ready jobs)
# for every claim_bench scenario, full scan (the reference, akadze 0.5.0's
# query) and akadzed, as one PNG of small log-log panels.
#
#   bench/plot_claims.sh [BUILD_DIR] [OUTPUT_PNG]
#
# BUILD_DIR defaults to build, OUTPUT_PNG to docs/img/claim_time_vs_queue.png.
# The claim_bench CSVs go to $CSV_DIR (default: a temporary directory); a CSV
# already there (claims_10000.csv, claims_100000.csv, claims_1000000.csv) is
# plotted as it is, so a run can be re-plotted without measuring again.
# $RUNS_1M (default 3) sets the runs at 10^6 jobs, where one full scan takes
# seconds; the smaller sizes take claim_bench's default 15.
set -eu

build=${1:-build}
out=${2:-docs/img/claim_time_vs_queue.png}
csv_dir=${CSV_DIR:-$(mktemp -d)}
runs_1m=${RUNS_1M:-3}
mkdir -p "$csv_dir" "$(dirname "$out")"

for n in 10000 100000 1000000; do
  csv="$csv_dir/claims_$n.csv"
  [ -s "$csv" ] && continue
  if [ "$n" = 1000000 ]; then runs="--runs $runs_1m --warmup 1"; else runs=""; fi
  echo "claim_bench --jobs $n $runs (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  # shellcheck disable=SC2086
  nice -n 10 "$build/bench/claim_bench" --jobs "$n" $runs --delay-ms 0 --csv "$csv.part" >&2
  mv "$csv.part" "$csv"
done

# One data block per scenario: jobs, full scan ms, akadzed ms. Fields are
# taken from the right: the label (field 2) may hold quoted commas.
data="$csv_dir/plot.dat"
scenarios=$(tail -n +2 "$csv_dir/claims_100000.csv" | cut -d, -f1)
: >"$data"
for s in $scenarios; do
  echo "# $s" >>"$data"
  for n in 10000 100000 1000000; do
    awk -F, -v s="$s" 'NR > 1 && $1 == s { print $(NF-13), $(NF-10), $(NF-9) }' "$csv_dir/claims_$n.csv"
  done >>"$data"
  printf '\n\n' >>"$data"
done

count=$(echo "$scenarios" | wc -w)
cols=4
rows=$(( (count + cols - 1) / cols ))
{
  echo "set terminal pngcairo size 1600,$((rows * 330)) font 'sans,9'"
  echo "set output '$out'"
  echo "set multiplot layout $rows,$cols title 'Claim time vs ready jobs (slots = 20, median; log-log): full scan (akadze 0.5.0 query) and akadzed' font 'sans,12'"
  echo "set logscale xy"
  echo "set xrange [7000:1400000]"
  echo "set yrange [0.5:20000]"
  echo "set xtics ('10^4' 10000, '10^5' 100000, '10^6' 1000000)"
  echo "set ytics ('1' 1, '10' 10, '100' 100, '1 s' 1000, '10 s' 10000)"
  echo "set ylabel 'ms'"
  echo "set grid"
  echo "set key top left"
  i=0
  for s in $scenarios; do
    echo "set title '$s'"
    echo "plot '$data' index $i using 1:2 with linespoints lw 2 pt 7 title 'full scan', '' index $i using 1:3 with linespoints lw 2 pt 5 title 'akadzed'"
    i=$((i + 1))
  done
  echo "unset multiplot"
} | gnuplot

echo "wrote $out (CSVs in $csv_dir)" >&2
