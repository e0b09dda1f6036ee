# gnuplot script for scripts/plot_bench.sh: GFLOP/s vs T (log2 x) for the fused kernel and the
# unfused Eigen baseline. Variables: datafile, outfile, threads.
set terminal pngcairo size 900,560 noenhanced
set output outfile
set title sprintf("gattn causal prefill (H_q 16, H_kv 4, D 128), %s thread(s), medians", threads)
set xlabel "T (tokens)"
set ylabel "GFLOP/s"
set logscale x 2
set grid
set key top left
plot datafile using 1:2 with linespoints lw 2 title "fused, plain", \
     datafile using 1:3 with linespoints lw 2 title "fused, g1_elementwise", \
     datafile using 1:4 with linespoints lw 2 title "unfused Eigen + gate"
