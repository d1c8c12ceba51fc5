# Sourced by instructions.sh and sim-instructions.sh.
#
#   callgrind_totals FILE     prints "EVENT=COUNT ..." for a callgrind output's program totals
#                             (Ir alone, or every simulated event with --cache-sim/--branch-sim)
callgrind_totals() {
    # The events line names the columns of the totals line.
    callgrind_annotate "$1" 2>/dev/null | awk '
        /^Events shown:/ { for (i = 3; i <= NF; i++) ev[i - 2] = $i }
        /PROGRAM TOTALS/ { gsub(",", ""); n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) printf "%s=%s ", ev[++n], $i }
        ' | sed 's/ *$//'
}
