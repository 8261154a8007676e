# The endurance benchmark over time (bench/endurance/run writes the data:
# windows-<system>.dat, one line per window: t p50_ms p99_ms backlog_max
# dead claim_ms client_us server_us table_mb index_mb rss_mb claim_idx_entries).
#   gnuplot -e "dir='...'; systems='akadzed graphile pgboss'; output='endurance.png'; \
#               hold_from=30; hold_to=90; note='...'" endurance.gp
# The hold (hold_from to hold_to, seconds; equal: none) is shaded.
if (!exists("note")) note = ""
set terminal pngcairo size 1200,1100 font "sans,10"
set output output
set multiplot layout 3,2 title "Endurance: a snapshot held on one PostgreSQL 15 (shaded), per window\n".note font "sans,12"
set grid
set key top left
set xlabel "seconds"
if (hold_to > hold_from) set object 1 rect from hold_from, graph 0 to hold_to, graph 1 fc rgb "#e8e8e8" fs solid behind
file(s) = dir."/windows-".s.".dat"
name(s) = s eq "graphile" ? "Graphile Worker" : s eq "pgboss" ? "pg-boss" : s

set title "enqueue-to-start p99 (ms, log)"
set logscale y
plot for [s in systems] file(s) using 1:3 with linespoints pt 7 ps 0.6 lw 2 title name(s)
set title "enqueue-to-start p50 (ms, log)"
plot for [s in systems] file(s) using 1:2 with linespoints pt 7 ps 0.6 lw 2 title name(s)
set title "claim time (ms, log): akadzed's histogram; the peers' SKIP LOCKED statements"
plot for [s in systems] file(s) using 1:6 with linespoints pt 7 ps 0.6 lw 2 title name(s)
unset logscale y
set title "ready backlog (max of 1 s samples)"
set yrange [0:*]
plot for [s in systems] file(s) using 1:4 with linespoints pt 7 ps 0.6 lw 2 title name(s)
set title "dead row versions (n\\_dead\\_tup)"
plot for [s in systems] file(s) using 1:5 with linespoints pt 7 ps 0.6 lw 2 title name(s)
set title "CPU per job started, µs: worker (solid) and server (dashed)"
plot for [i=1:words(systems)] file(word(systems, i)) using 1:7 with linespoints pt 7 ps 0.6 lw 2 lc i title name(word(systems, i))." worker", \
     for [i=1:words(systems)] file(word(systems, i)) using 1:8 with linespoints pt 7 ps 0.6 lw 2 dt 2 lc i title name(word(systems, i))." server"
unset multiplot
