# Bar chart of burn-down jobs/s (bench/throughput/run writes the data file:
# one line per system, "label" jobs_per_s).
#   gnuplot -e "data='throughput.dat'; output='throughput.png'; note='...'" throughput.gp
# `note` (optional) is a second title line: jobs, date, load.
if (!exists("note")) note = ""
set terminal pngcairo size 900,480 font "sans,11"
set output output
set title "Burn-down of no-op jobs on one PostgreSQL 15, jobs/s (higher is better)\n".note
set ylabel "jobs/s"
set style fill solid 0.8 border -1
set boxwidth 0.6
set grid ytics
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set bmargin 4
set format y "%.0f"
unset key
plot data using 0:2:xtic(1) with boxes lc rgb "#4477aa", \
     '' using 0:2:(sprintf("%.0f", $2)) with labels offset 0,0.8
