// INA226 front end.
//
// The INA226 runs in continuous shunt + bus mode, both conversions at the
// same conversion time (140 us by default, no averaging: one sample per
// 280 us = 3571 S/s). Its ALERT pin is set to "conversion ready" and wired to
// D8 = ICP1, so Timer1 latches the exact tick of every conversion-ready edge
// in hardware. The input-capture ISR then reads the shunt-voltage register
// (01h), Mask/Enable (06h: clears the flag, releases ALERT) and the
// bus-voltage register (02h). The INA226 loads all result registers together
// at the end of a cycle, so the three reads see one cycle's results as long
// as they end before the next one (280 us).
//
// Current comes from the shunt-voltage register (2.5 uV/count), not from the
// current register, so no calibration register is programmed and
// current_lsb_nA = 2.5 uV / shunt (IDENT; SET_CAL can change it).
//
// Timing: a cycle is [shunt conversion][bus conversion] ending at the alert
// T; with N averages the shunt slots spread over the whole period P, so the
// shunt reading stands for T - P/2 - P/(4N) (= T - 3P/4 without averaging).
// P is measured between alerts, so the INA226's own oscillator error does not
// bias timestamps. The markers are read by a Timer1 compare at that same
// instant (predicted from the previous alert), not at the alert.
//
// I2C: 1 MHz through the INA226's high-speed mode: after a START the master
// code 0x08 is sent at 400 kHz (nobody acknowledges), the clock switches to
// 1 MHz and the bus is then held with repeated STARTs only, as Hs-mode
// requires, until streaming stops. The TWI is interrupt-driven: its ISR steps
// through a precomputed script (status expected, byte to send, TWCR value)
// and makes no calls, and waits out a (repeated) START (1 us) in place rather
// than returning for it, so a register read (S, SLA+W, ptr, Sr, SLA+R, 2
// bytes = 47 SCL periods) costs 5 interrupts, ~70 us in all. Mask/Enable
// and shunt are read every cycle (~140 us of the 280 us cycle); the bus
// voltage every INA226_BUS_EVERY-th cycle at the fastest rate (default 4,
// i.e. every 1.12 ms; ~210 us of reads in those cycles), every cycle at the
// slower rates, whose periods leave room for it (bus_every).
// Reading the bus less often does not raise the current rate, which the
// conversion times fix; it keeps most cycles' reads well inside the period
// while edges and UART traffic interrupt them. A cycle whose reads overrun
// loses nothing: Mask/Enable goes first (the next alert's flag is never
// swallowed) and the late alert is taken up when the bus frees. Polling the
// whole sequence was tried: ~1 us per bus event but ~70 % of the CPU, which
// starved the main loop that frames the samples. The samples of cycles
// without a bus reading get the bus voltage interpolated to their instant in
// the main loop (fe_pop_sample).
//
// Marker edges: the TWI vector keeps interrupts off for 15 cycles, the
// capture and compare handlers only while they copy 16-bit timer registers,
// so the pin-change handler is never held off for long (README: interrupts
// off).
#include "fw_config.h"

#if CP_FRONT_END == CP_FE_ID_INA226

#include <avr/interrupt.h>
#include <avr/io.h>
#include <util/atomic.h>

#include "clock.h"
#include "cp_protocol.h"
#include "cp_rate.h"
#include "frontend.h"
#include "sampler.h"
#include "uart.h"

#define REG_CONFIG 0x00
#define REG_SHUNT 0x01
#define REG_BUS 0x02
#define REG_MASK 0x06
#define REG_MFG_ID 0xFE
#define MFG_ID_TI 0x5449
#define MASK_CNVR 0x0400 // ALERT on conversion ready
#define HS_MASTER_CODE 0x08

#define SLA_W (INA226_ADDR << 1)
#define SLA_R ((INA226_ADDR << 1) | 1)

#define TWBR_400K ((F_CPU / 400000UL - 16UL) / 2UL)
#define TWBR_FAST ((F_CPU / INA226_TWI_HZ - 16UL) / 2UL)
#define USE_HS (INA226_TWI_HZ > 400000UL)

#ifndef INA226_BUS_EVERY
#define INA226_BUS_EVERY 4
#endif

// One register read: S, SLA+W, ptr, Sr, SLA+R, 2 bytes = 47 SCL periods, plus
// ~4 us per TWI interrupt (5 of them) until the next bus action starts.
#define READ_US (47000000UL / INA226_TWI_HZ + 20UL)
#define READS_PER_CYCLE 3UL
// A conversion cycle must leave room for its reads, with 25 % margin.
#define MIN_PERIOD_US (READS_PER_CYCLE * READ_US * 5UL / 4UL)

#define TWCR_GO (_BV(TWINT) | _BV(TWEN) | _BV(TWIE))
// a (repeated) START the ISR waits for itself: no interrupt for it
#define TWCR_SPIN_START (_BV(TWINT) | _BV(TWEN) | _BV(TWSTA))
#define TWCR_HOLD _BV(TWEN) // TWINT stays set: SCL held low, no interrupt
#define TWCR_STOP (_BV(TWINT) | _BV(TWSTO) | _BV(TWEN))

// ---- the I2C script ----
#define F_TWDR 0x01 // write `val` to TWDR
#define F_SAVE 0x02 // store TWDR into result[] (before the TWCR write)
#define F_TWBR 0x04 // write `val` to TWBR (the Hs switch)
#define F_HS 0x08   // Hs-mode entered
#define F_END 0x10  // sequence complete after this step
#define F_SPIN 0x20 // this step starts a (repeated) START: wait for it here

typedef struct {
    uint8_t expect; // TWSR status that must have arrived
    uint8_t flags;
    uint8_t val;
    uint8_t twcr; // written last: starts the next bus action
} step_t;

// [Hs entry] shunt, Mask/Enable, bus: 2 + 3 * 7 steps
static step_t script[2 + 3 * 7];
static uint8_t script_reads; // index of the first step after the Hs entry
static uint8_t shunt_last;   // last step of the shunt read
enum { R_MASK_H, R_MASK_L, R_SHUNT_H, R_SHUNT_L, R_BUS_H, R_BUS_L, R_COUNT };

static cp_ina226_setting setting;
static uint8_t back_shift; // log2(4 * averages): P / (4N) is a shift, not a division
static uint8_t present;

// streaming state
static volatile uint8_t twi_busy;
static uint8_t hs_active;
static const step_t *cur; // next script step
static uint8_t *res;      // next result byte
// two result buffers, used in turn: a finished sequence's results stay put
// while the next sequence fills the other one (no copying in the ISR)
static uint8_t result[3][R_COUNT]; // [2]: sequences that deliver no sample
static uint8_t *res_base; // the running sequence's buffer
static uint8_t res_sel;
static uint8_t deliver;   // the sequence belongs to a sample
static uint8_t cycle_n;   // cycles since start, for bus_every
static uint8_t bus_every; // read the bus every this many cycles: 1, or INA226_BUS_EVERY
static uint32_t cycle_t_us;
static uint8_t cycle_markers;
static uint8_t have_prev;
static uint32_t prev_ticks;
static uint32_t nominal_ticks; // nominal period
static uint32_t mk_offset;     // ticks from an alert to the next sample's instant
static volatile uint32_t last_alert_ticks;
static uint32_t mk_target;
static volatile uint8_t mk_value;
static volatile uint8_t mk_valid;
// A finished cycle's results wait here until the next capture ISR (or
// fe_stop) queues the sample, so the TWI ISR makes no calls.
static volatile uint8_t ready; // 1: a sample is waiting; 2: the cycle failed
static uint8_t *volatile done; // the finished sequence's buffer
// an alert that came while the bus was busy, taken up when it frees
static volatile uint8_t alert_pending;
static uint16_t pending_c;
static uint32_t pending_o;
volatile uint16_t ina_twi_errors;
#define BUS_NONE 0xFFFFu // a sample whose cycle did not read the bus
static uint8_t stopped;  // fe_stop ran: fe_pop_sample holds nothing back
// main loop (fe_pop_sample): samples waiting for the next bus reading
#define QN (2 * INA226_BUS_EVERY)
static cp_sample q[QN];      // a ring: q_ready interpolated, then the group waiting
static uint8_t q_head, q_len, q_ready;
static uint16_t bus0;        // the reading of the waiting group's first sample
static uint8_t have_bus0;    // a group is waiting (its first sample came with bus0)
static uint16_t last_bus;    // the latest reading (samples before any: 0)


static uint8_t add_step(uint8_t i, uint8_t expect, uint8_t flags, uint8_t val, uint8_t twcr)
{
    script[i].expect = expect;
    script[i].flags = flags;
    script[i].val = val;
    script[i].twcr = twcr;
    return (uint8_t)(i + 1u);
}

// Steps of one register read; the caller's START (first_status 0x08) or
// repeated START (0x10) precedes them.
static uint8_t add_read(uint8_t i, uint8_t first_status, uint8_t reg)
{
    i = add_step(i, first_status, F_TWDR, SLA_W, TWCR_GO);
    i = add_step(i, 0x18, F_TWDR, reg, TWCR_GO);                        // pointer
    i = add_step(i, 0x28, F_SPIN, 0, TWCR_SPIN_START);                  // Sr
    i = add_step(i, 0x10, F_TWDR, SLA_R, TWCR_GO);
    i = add_step(i, 0x40, 0, 0, TWCR_GO | _BV(TWEA));                   // MSB, ACK
    i = add_step(i, 0x50, F_SAVE, 0, TWCR_GO);                          // LSB, NACK
    i = add_step(i, 0x58, F_SAVE | F_SPIN, 0, TWCR_SPIN_START);         // next read
    return i;
}

static void build_script(void)
{
    uint8_t i = 0;
    if (USE_HS) {
        i = add_step(i, 0x08, F_TWDR, HS_MASTER_CODE, TWCR_GO);
        i = add_step(i, 0x20, F_TWBR | F_HS | F_SPIN, (uint8_t)TWBR_FAST, TWCR_SPIN_START);
    }
    script_reads = i;
    // Mask/Enable first: it clears the conversion-ready flag at once, so
    // even a sequence that runs late cannot swallow the next cycle's alert.
    // Then shunt and bus: the INA226 loads all result registers together at
    // the end of a cycle, so they hold this cycle's values for a whole
    // period. Results land in that order. In Hs-mode every sequence starts
    // with a repeated START (the bus is held); else with a START.
    i = add_read(i, USE_HS ? 0x10 : 0x08, REG_MASK);
    i = add_read(i, 0x10, REG_SHUNT);
    shunt_last = (uint8_t)(i - 1u);
    i = add_read(i, 0x10, REG_BUS);
    script[i - 1u].flags = F_SAVE | F_END;
    script[i - 1u].twcr = USE_HS ? TWCR_HOLD : TWCR_STOP;
}

// ---------- polled I2C, used only while not streaming ----------

static int twi_wait(void)
{
    uint16_t n = 0;
    while (!(TWCR & _BV(TWINT))) {
        if (++n == 0) { // ~30 ms
            return 0;
        }
    }
    return 1;
}

static void twi_stop_polled(void)
{
    uint16_t n = 0;
    TWCR = TWCR_STOP;
    while ((TWCR & _BV(TWSTO)) && ++n) {
    }
}

static int twi_begin(uint8_t sla)
{
    TWCR = _BV(TWINT) | _BV(TWSTA) | _BV(TWEN);
    if (!twi_wait() || ((TWSR & 0xF8) != 0x08 && (TWSR & 0xF8) != 0x10)) {
        return 0;
    }
    TWDR = sla;
    TWCR = _BV(TWINT) | _BV(TWEN);
    if (!twi_wait()) {
        return 0;
    }
    return (TWSR & 0xF8) == ((sla & 1) ? 0x40 : 0x18);
}

static int twi_put(uint8_t b)
{
    TWDR = b;
    TWCR = _BV(TWINT) | _BV(TWEN);
    return twi_wait() && (TWSR & 0xF8) == 0x28;
}

static int ina_write(uint8_t reg, uint16_t v)
{
    int ok = twi_begin(SLA_W) && twi_put(reg) && twi_put((uint8_t)(v >> 8)) && twi_put((uint8_t)v);
    twi_stop_polled();
    return ok;
}

static int ina_read(uint8_t reg, uint16_t *v)
{
    uint8_t h;
    int ok = twi_begin(SLA_W) && twi_put(reg) && twi_begin(SLA_R);
    if (ok) {
        TWCR = _BV(TWINT) | _BV(TWEN) | _BV(TWEA);
        ok = twi_wait() && (TWSR & 0xF8) == 0x50;
        h = TWDR;
        if (ok) {
            TWCR = _BV(TWINT) | _BV(TWEN);
            ok = twi_wait() && (TWSR & 0xF8) == 0x58;
            *v = (uint16_t)((uint16_t)h << 8 | TWDR);
        }
    }
    twi_stop_polled();
    return ok;
}

static void twi_reset_slow(void)
{
    TWCR = 0;
    TWSR = 0; // prescaler 1
    TWBR = (uint8_t)TWBR_400K;
    TWCR = _BV(TWEN);
}

static void choose(uint32_t req_hz)
{
    uint16_t a;
    cp_ina226_pick(req_hz, MIN_PERIOD_US, &setting);
    back_shift = 2;
    for (a = setting.avg; a > 1u; a >>= 1) {
        back_shift++;
    }
    nominal_ticks = setting.period_us * 2u;
    mk_offset = nominal_ticks - (nominal_ticks >> 1) - (nominal_ticks >> back_shift);
    // a cycle twice the reads' worst case has room for the bus every time
    bus_every = setting.period_us >= 2u * MIN_PERIOD_US ? 1u : INA226_BUS_EVERY;
}

static int probe(void)
{
    uint16_t id = 0;
    twi_reset_slow();
    present = ina_read(REG_MFG_ID, &id) && id == MFG_ID_TI;
    return present;
}

// ---------- streaming ----------

// OCF1A is not cleared here: a flag left from an earlier wrap only runs the
// ISR once early, which the overflow-count check ignores. (Writing TIFR1
// would also, under simavr 1.6, clear a pending overflow: the clock would
// lose 32.8 ms.)
static void arm_marker_read(uint32_t target_ticks)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        mk_target = target_ticks;
        mk_valid = 0;
        OCR1A = (uint16_t)target_ticks;
        TIMSK1 |= _BV(OCIE1A);
    }
}

// Markers at the predicted instant of the next sample. Interruptible at
// once (edge timestamps); it cannot re-enter: the next match of this 16-bit
// compare is a Timer1 wrap (32 ms) away, and it disables itself on time.
ISR(TIMER1_COMPA_vect, ISR_NOBLOCK)
{
    uint8_t m = markers_read();
    uint16_t now, oc;
    uint8_t tov, o;
    cli(); // 16-bit registers go through TEMP, shared with the edge handler
    now = TCNT1;
    oc = OCR1A;
    tov = TIFR1;
    o = (uint8_t)clk_ovf;
    sei();
    // the overflow count (low byte) of the match
    if ((tov & _BV(TOV1)) && now < 0x8000u) {
        o++;
    }
    if (oc > now) {
        o--;
    }
    if (o == (uint8_t)(mk_target >> 16)) { // the match of this wrap, not of an earlier one
        mk_value = m;
        mk_valid = 1;
        cli(); // TIMSK1 is shared with the TWI handler (OCIE1B)
        TIMSK1 &= (uint8_t)~_BV(OCIE1A);
        sei();
    }
}

// Queue what the last sequence produced (capture ISR, or fe_stop).
static void collect(void)
{
    uint8_t r = ready;
    ready = 0;
    if (r == 1) {
        cp_sample s;
        s.t_us = cycle_t_us;
        const uint8_t *d = done;
        s.current = (int16_t)((uint16_t)d[R_SHUNT_H] << 8 | d[R_SHUNT_L]);
        // the bus reading of this cycle, or none (fe_pop_sample fills it in)
        s.bus = (d[R_BUS_H] & 0x80) ? BUS_NONE : (uint16_t)((uint16_t)d[R_BUS_H] << 8 | d[R_BUS_L]);
        s.markers = cycle_markers;
        sampler_push(&s);
    } else if (r == 2) {
        sampler_missed();
    }
}

// No TWI interrupt can come while the bus is idle or held, so this needs no
// lock against the TWI ISR; callers keep other starters out via twi_busy.
static void start_sequence(uint8_t with_sample)
{
    uint8_t with_bus = with_sample && ++cycle_n >= bus_every;
    if (with_bus) {
        cycle_n = 0;
    }
    // end after the shunt read when the bus read is skipped
    script[shunt_last].flags = with_bus ? (F_SAVE | F_SPIN) : (F_SAVE | F_END);
    script[shunt_last].twcr = with_bus ? TWCR_SPIN_START : (USE_HS ? TWCR_HOLD : TWCR_STOP);
    if (with_sample) {
        res_base = result[res_sel];
        res_sel ^= 1u;
    } else { // fe_poll's recovery: leave the buffer a sample still waits in alone
        res_base = result[2];
    }
    res = res_base;
    res_base[R_BUS_H] = 0xFF; // "not read": a bus reading is below 0x8000
    deliver = with_sample;
    twi_busy = 1;
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        uart_tx_hold(); // until the sequence ends: see uart.h
    }
    if (USE_HS && !hs_active) {
        TWBR = (uint8_t)TWBR_400K;
        cur = &script[0];
    } else {
        cur = &script[script_reads];
    }
    // START, or a repeated START while the Hs-mode bus is held
    TWCR = TWCR_GO | _BV(TWSTA);
}

// The timing work of one alert (capture c, overflow count o): the bus first,
// then the previous cycle's sample, then this cycle's time and markers.
// Interrupts enabled; twi_busy already set by the caller.
static void process_alert(uint16_t c, uint32_t o)
{
    uint32_t t_ticks = clock_ticks_of(o, c);
    uint32_t p, back;
    // this sample's markers (read by the compare at its instant, if it came)
    uint8_t markers = mk_valid ? mk_value : markers_read();
    arm_marker_read(t_ticks + mk_offset); // the next sample's instant, ~P/4 away
    start_sequence(1);
    collect(); // the previous cycle's sample: its results are in *done
    cycle_markers = markers;
    p = nominal_ticks;
    if (have_prev) {
        p = t_ticks - prev_ticks;
        if (p < nominal_ticks / 2u || p > nominal_ticks + nominal_ticks / 2u) {
            p = nominal_ticks; // a missed alert in between: keep the nominal period
        }
    }
    prev_ticks = t_ticks;
    have_prev = 1;
    last_alert_ticks = t_ticks;
    back = (p >> 1) + (p >> back_shift); // ticks from the sample's instant to T
    mk_offset = p - back;
    cycle_t_us = clock_us_of(o, c) - (back >> 1);
}

// Runs an alert that waited for the bus (armed by the TWI handler).
ISR(TIMER1_COMPB_vect, ISR_NOBLOCK)
{
    uint16_t c;
    uint32_t o;
    uint8_t go;
    cli();
    TIMSK1 &= (uint8_t)~_BV(OCIE1B);
    go = alert_pending;
    alert_pending = 0;
    c = pending_c;
    o = pending_o;
    sei();
    if (go) {
        process_alert(c, o); // twi_busy is still set for it
    }
}

// ALERT fell: a shunt + bus conversion pair is ready. Interruptible from the
// first instruction (the UART receiver must be served within 10 us); ICR1
// keeps the edge's tick until the next edge, a period later.
ISR(TIMER1_CAPT_vect, ISR_NOBLOCK)
{
    uint16_t c, now;
    uint32_t o;
    uint8_t tov;
    cli(); // ICR1, TCNT1, the overflow count and TOV1 together: a short copy
    c = ICR1;
    now = TCNT1;
    tov = TIFR1;
    o = clk_ovf;
    sei();
    // the overflow count of the captured tick (the overflow ISR may have run since)
    if ((tov & _BV(TOV1)) && now < 0x8000u) {
        o++;
    }
    if (c > now) {
        o--;
    }
    cli(); // the hand-over with the TWI handler's end (alert_pending)
    if (twi_busy) {
        // The previous cycle's reads are still running (edges and UART load
        // stretch them at times). They cleared this alert's flag first thing
        // and the registers hold this cycle's values for a period: the TWI
        // handler takes this alert up when it finishes.
        if (alert_pending) {
            sampler_missed(); // two behind: give the older one up
        }
        alert_pending = 1;
        pending_c = c;
        pending_o = o;
        sei();
        return;
    }
    twi_busy = 1; // keeps fe_poll out
    sei();
    process_alert(c, o);
}

// The TWI vector runs the common steps itself, by hand: it switches the TWI
// interrupt off (TWIE = 0; writing TWINT as 0 leaves it set, so the bus
// waits), enables interrupts (12 cycles with them off: a marker edge is
// timestamped within a few us even mid-sequence), checks the status, saves
// TWDR or loads it, and writes the step's TWCR, which clears TWINT and re-arms
// TWIE: ~75 cycles a step instead of ~120 through the compiler's handler, at
// 48,000 steps a second. A (repeated) START is waited for in place (one SCL
// period) and the next step follows. The end of a sequence, the Hs-mode
// switch and any unexpected status go to twi_body, entered as from the vector.
extern "C" {
#pragma GCC diagnostic ignored "-Wmisspelled-isr"
void twi_body(void) __attribute__((signal, used, externally_visible));
}

ISR(TWI_vect, ISR_NAKED)
{
    __asm__ __volatile__(
        "push r24\n\t"
        "ldi r24, %[twen]\n\t"
        "sts %[twcr], r24\n\t"
        "in r24, __SREG__\n\t"
        "sei\n\t"
        "push r24\n\t"
        "push r25\n\t"
        "push r30\n\t"
        "push r31\n\t"
        "lds r30, %[cur]\n\t"
        "lds r31, %[cur]+1\n"
        "1:\n\t" // the step at Z
        "lds r24, %[twsr]\n\t"
        "andi r24, 0xf8\n\t"
        "ld r25, Z\n\t"
        "cp r24, r25\n\t"
        "brne 8f\n\t" // an unexpected status: twi_body
        "ldd r25, Z+1\n\t"
        "mov r24, r25\n\t"
        "andi r24, %[special]\n\t"
        "brne 8f\n\t" // the end, the Hs switch: twi_body
        "sbrs r25, %[b_save]\n\t"
        "rjmp 2f\n\t"
        "push r26\n\t"
        "push r27\n\t"
        "lds r26, %[res]\n\t"
        "lds r27, %[res]+1\n\t"
        "lds r24, %[twdr]\n\t"
        "st X+, r24\n\t"
        "sts %[res], r26\n\t"
        "sts %[res]+1, r27\n\t"
        "pop r27\n\t"
        "pop r26\n"
        "2:\n\t"
        "sbrs r25, %[b_twdr]\n\t"
        "rjmp 3f\n\t"
        "ldd r24, Z+2\n\t"
        "sts %[twdr], r24\n"
        "3:\n\t"
        "ldd r24, Z+3\n\t"
        "adiw r30, 4\n\t"
        "sts %[cur], r30\n\t" // before the bus moves on
        "sts %[cur]+1, r31\n\t"
        "sts %[twcr], r24\n\t" // the bus moves on
        "sbrs r25, %[b_spin]\n\t"
        "rjmp 9f\n\t"
        "ldi r25, 0\n" // a START: wait for it (TWIE is off for it), then the next step
        "4:\n\t"
        "lds r24, %[twcr]\n\t"
        "sbrc r24, %[b_twint]\n\t"
        "rjmp 1b\n\t"
        "dec r25\n\t"
        "brne 4b\n\t"
        "rjmp 1b\n" // timed out: the status check fails
        "9:\n\t"
        "pop r31\n\t"
        "pop r30\n\t"
        "pop r25\n\t"
        "pop r24\n\t"
        "out __SREG__, r24\n\t"
        "pop r24\n\t"
        "reti\n"
        "8:\n\t" // twi_body, entered as from the vector: TWIE off, interrupts on
        "pop r31\n\t"
        "pop r30\n\t"
        "pop r25\n\t"
        "pop r24\n\t"
        "out __SREG__, r24\n\t"
        "pop r24\n\t"
        "sei\n\t"
        "jmp twi_body\n\t"
        :
        : [twen] "M"(_BV(TWEN)), [twcr] "i"(_SFR_MEM_ADDR(TWCR)),
          [twsr] "i"(_SFR_MEM_ADDR(TWSR)), [twdr] "i"(_SFR_MEM_ADDR(TWDR)), [cur] "i"(&cur),
          [res] "i"(&res), [special] "M"(F_TWBR | F_HS | F_END), [b_save] "I"(1),
          [b_twdr] "I"(0), [b_spin] "I"(5), [b_twint] "I"(TWINT));
}

// Steps through the script. Everything before the TWCR write is on the bus's
// critical path (SCL is held low until then), so that part is kept short.
// Interrupts are on (the stub) except where the hand-over with the capture
// handler (twi_busy, alert_pending) and the 16-bit timer registers need them off.
void twi_body(void)
{
    const step_t *s = cur;
    for (;;) {
        uint8_t f = s->flags;
        uint8_t n = 0;
        if ((TWSR & 0xF8) != s->expect) { // NACK, arbitration lost, bus error
            cli(); // the hand-over with the capture handler
            TWCR = TWCR_STOP; // releases the bus, leaves Hs-mode
            hs_active = 0;
            twi_busy = 0;
            uart_tx_release();
            ina_twi_errors++;
            if (deliver) {
                ready = 2;
            }
            if (alert_pending) { // fe_poll recovers the alert flag
                alert_pending = 0;
                sampler_missed();
            }
            return;
        }
        if (f & F_SAVE) {
            *res++ = TWDR;
        }
        if (f & F_TWDR) {
            TWDR = s->val;
        }
        if (f & F_TWBR) {
            TWBR = s->val;
        }
        cur = s + 1; // before the bus moves on: the next TWI interrupt reads it
        TWCR = s->twcr;
        if (f & F_END) { // the bus is held or stopped: no TWI interrupt follows
            cli();
            if (deliver) {
                done = res_base;
                ready = 1;
            }
            if (alert_pending) {
                // An alert waited for the bus: its turn now, in the compare-B
                // handler (a call from here would make this handler save
                // every scratch register on every entry). twi_busy stays set.
                OCR1B = (uint16_t)(TCNT1 + 4u);
                TIMSK1 |= _BV(OCIE1B);
                sei();
                return;
            }
            twi_busy = 0;
            uart_tx_release();
            sei(); // the epilogue may be interrupted: edges wait less
            return;
        }
        if (f & F_HS) {
            hs_active = 1;
        }
        if (!(f & F_SPIN)) {
            // a byte takes 9 SCL periods (9 us): the next step is an interrupt
            return;
        }
        // a START: about one SCL period, waited for here (TWIE is off for it)
        while (!(TWCR & _BV(TWINT))) {
            if (++n == 0) {
                break; // let the status check fail
            }
        }
        s = cur;
    }
}

// ---------- front-end interface ----------

uint32_t fe_init(cp_ident *id)
{
    // ALERT: D8 = PB0 = ICP1, open drain: input with pull-up
    DDRB &= (uint8_t)~_BV(PB0);
    PORTB |= _BV(PB0);
    build_script();
    choose(INA226_DEFAULT_RATE_HZ);
    if (probe()) {
        ina_write(REG_CONFIG, setting.config);
    }
    id->front_end = CP_FE_INA226;
    id->flags = CP_FLAG_BUS_MEASURED;
    id->rate_hz = setting.rate_hz;
    id->shunt_uohm = INA226_SHUNT_UOHM;
    id->current_lsb_nA = (int32_t)((2500000000UL + INA226_SHUNT_UOHM / 2UL) / INA226_SHUNT_UOHM);
    id->bus_lsb_uV = 1250;
    id->bus_nominal_mV = BUS_NOMINAL_MV;
    return 2500; // nV per shunt-register count
}

uint32_t fe_set_rate(uint32_t req_hz)
{
    choose(req_hz);
    if (present) {
        ina_write(REG_CONFIG, setting.config);
    }
    return setting.rate_hz;
}

int fe_start(void)
{
    uint16_t mask;
    if (!present && !probe()) {
        return 0;
    }
    twi_reset_slow();
    // configuration write restarts the conversions; then arm ALERT and clear
    // a flag left from before
    if (!ina_write(REG_CONFIG, setting.config) || !ina_write(REG_MASK, MASK_CNVR) ||
        !ina_read(REG_MASK, &mask)) {
        present = 0;
        return 0;
    }
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        hs_active = 0;
        twi_busy = 0;
        have_prev = 0;
        mk_valid = 0;
        ready = 0;
        alert_pending = 0;
        q_head = q_len = q_ready = 0;
        have_bus0 = 0;
        last_bus = 0;
        stopped = 0;
        cycle_n = (uint8_t)(bus_every - 1); // the first cycle reads the bus
        last_alert_ticks = clock_now_ticks_isr();
        TCCR1B &= (uint8_t)~_BV(ICES1); // falling edge
        TCCR1B |= _BV(ICNC1);           // noise canceler (4 cycles)
        clock_clear_flags(_BV(ICF1));
        TIMSK1 |= _BV(ICIE1);
    }
    return 1;
}

void fe_stop(void)
{
    uint16_t n = 0;
    TIMSK1 &= (uint8_t) ~(_BV(ICIE1) | _BV(OCIE1A));
    while (twi_busy && ++n) { // a sequence in flight (and one waiting) ends in < 1 ms
    }
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        TIMSK1 &= (uint8_t)~_BV(OCIE1B);
        alert_pending = 0;
        twi_busy = 0;
        hs_active = 0;
        uart_tx_release();
        collect(); // the last cycle's sample (no ISR queues samples now)
        stopped = 1;
    }
    twi_stop_polled(); // leaves Hs-mode
    twi_reset_slow();
}

// The bus voltage is read every bus_every-th cycle; the ISR queues
// the other cycles' samples with bus = BUS_NONE. Here, in the main loop, a
// sample with a reading and the ones after it wait for the next reading, then
// each gets the bus voltage at its own instant, interpolated between the two
// (a reading stands for the middle of its bus conversion, half a cycle after
// its sample's instant). Holding the latest reading instead made power lag a
// changing supply by up to 3 cycles (0.3 % on the rig's 33 V/s supply ramp).
// Samples leave up to 4 cycles (1.1 ms) late; none is held once stopped.

static cp_sample *q_at(uint8_t i)
{
    return &q[(uint8_t)(q_head + i) % QN];
}

// The waiting group q[q_ready .. q_len) gets its bus voltages, interpolated
// from bus0 to bus1: sample j (0 = the one that came with bus0) sits at
// (j - 1/2) / n of the way. bus1 == bus0: all bus0 (no later reading).
static void release_group(uint16_t bus1)
{
    uint8_t n = (uint8_t)(q_len - q_ready), j;
    int16_t diff = (int16_t)(bus1 - bus0);
    for (j = 0; j < n; j++) {
        int16_t num = (int16_t)(diff * (int16_t)(2 * j - 1)), step; // |diff|: a few counts
        if (n == 4) { // the usual group: no division (rounded half up)
            step = (int16_t)((int16_t)(num + 4) >> 3);
        } else {
            int16_t den = (int16_t)(2 * n);
            step = (int16_t)((num >= 0 ? num + n : num - n) / den); // rounded
        }
        q_at((uint8_t)(q_ready + j))->bus = (uint16_t)(bus0 + step);
    }
    q_ready = q_len;
    have_bus0 = 0;
}

int fe_pop_sample(cp_sample *s)
{
    while (!q_ready) {
        cp_sample r;
        if (!cp_ring_get(&sample_ring, &r, (uint8_t)sizeof r)) {
            if (stopped && q_len) {
                release_group(bus0); // the last readings: nothing to wait for
                break;
            }
            return 0;
        }
        if (r.bus != BUS_NONE) { // a reading: the group before it is complete
            if (have_bus0) {
                release_group(r.bus);
            }
            last_bus = bus0 = r.bus;
            have_bus0 = 1;
        } else if (!have_bus0 || q_len - q_ready >= bus_every) {
            // none to wait for (before the first reading, or one failed):
            // the group so far keeps its reading, this one the latest
            if (have_bus0) {
                release_group(bus0);
            }
            r.bus = last_bus;
            *q_at(q_len++) = r;
            q_ready = q_len;
            continue;
        }
        *q_at(q_len++) = r;
    }
    *s = q[q_head];
    q_head = (uint8_t)((q_head + 1u) % QN);
    q_len--;
    q_ready--;
    return 1;
}

void fe_poll(void)
{
    // A failed sequence leaves the conversion-ready flag set, so ALERT stays
    // low and no further edge comes: after 4 quiet periods, read Mask/Enable.
    uint32_t now, last;
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        // together: an alert between the two reads would make now - last
        // negative, i.e. huge, and start a sequence nobody asked for
        now = clock_now_ticks_isr();
        last = last_alert_ticks;
    }
    if ((int32_t)(now - last) <= (int32_t)(nominal_ticks * 4u)) {
        return;
    }
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        if (!twi_busy && (TIMSK1 & _BV(ICIE1)) && last_alert_ticks == last) {
            last_alert_ticks = now;
            have_prev = 0;
            start_sequence(0);
        }
    }
}

#endif
