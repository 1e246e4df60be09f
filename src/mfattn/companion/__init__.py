"""The companion layer: what runs, checks and renders the book (chapters and their parameters, the
runner, the command line, verdicts and their rendering, the evidence map, replication, the HTML check,
sweeps, plotting, the benchmark). It imports the science layer; the science never imports it."""
