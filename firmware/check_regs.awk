# Reads `avr-objdump -d` of a logger ELF; fails if code other than the
# handlers that own them writes the reserved registers r2..r11
# (coupprof_logger/fixed_regs.h), or saves and restores them (a pop would
# undo a handler's update). Reading them (the main loop reads the transmit
# tail, r2) is allowed anywhere.
#
# Owners: __vector_19 (USART_UDRE) r2..r5; __vector_21 (ADC) r6..r11;
# uart_init and fe_start set their initial values.
function reserved(op) { return op ~ /^r([2-9]|1[01])$/ }
/^[0-9a-f]+ <[^>]+>:$/ {
    fn = $2
    sub(/^</, "", fn); sub(/>:$/, "", fn)
    next
}
/^ +[0-9a-f]+:\t/ {
    n = split($0, f, "\t")
    if (n < 3) next
    mn = f[3]; ops = (n >= 4 ? f[4] : "")
    split(ops, w, /[ ,]+/)
    dst = w[1]
    if (!reserved(dst)) next
    # instructions whose first operand is only read
    if (mn ~ /^(cp|cpc|cpse|tst|sbrc|sbrs|bst)$/) next
    if (fn == "__vector_19" && dst ~ /^r[2-5]$/) next
    if (fn == "__vector_21" && dst ~ /^r([6-9]|1[01])$/) next
    if (fn ~ /uart_init/ && dst == "r2") next
    if (fn ~ /fe_start/ && dst ~ /^r[6-8]$/) next
    # data tables disassembled as code (the CRC tables, the vector table)
    if (fn ~ /^(cp_crc16_hi|cp_crc16_lo|__trampolines_end|__vectors|__ctors_end)$/) next
    printf "reserved register written outside its handler: %s: %s\n", fn, $0
    bad = 1
}
END {
    if (bad) { print "check_regs.awk: see coupprof_logger/fixed_regs.h"; exit 1 }
}
