// INA226 front end.
//
// The INA226 runs in continuous shunt + bus mode, both conversions at the
// same conversion time (140 us by default, no averaging: one sample per
// 280 us = 3571 S/s). Its ALERT pin is set to "conversion ready" and wired to
// D8 = ICP1, so Timer1 latches the exact tick of every conversion-ready edge
// in hardware. The input-capture ISR starts an interrupt-driven I2C sequence
// that reads the shunt-voltage register (01h), the bus-voltage register (02h)
// and Mask/Enable (06h, which clears the flag and releases ALERT).
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
// requires, until streaming stops. One cycle's three reads take ~200 us of
// the 280 us, so the bus voltage is read every cycle: reading it less often
// would not raise the current rate, which the conversion times fix.
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

// Time one register read (S, SLA+W, ptr, Sr, SLA+R, 2 bytes = 47 SCL periods)
// takes, plus ~3 us of clock stretching per TWI interrupt (7 of them).
#define READ_US (47000000UL / INA226_TWI_HZ + 21UL)
#define READS_PER_CYCLE 3UL
// A conversion cycle must leave room for its reads, with 25 % margin.
#define MIN_PERIOD_US (READS_PER_CYCLE * READ_US * 5UL / 4UL)

#define TWCR_GO (_BV(TWINT) | _BV(TWEN) | _BV(TWIE))

enum { PH_MASTER_CODE, PH_ADDR_W, PH_PTR, PH_ADDR_R, PH_READ };

static cp_ina226_setting setting;
static uint8_t back_shift; // log2(4 * averages): P / (4N) is a shift, not a division
static uint8_t present;

// ISR state
static volatile uint8_t twi_busy;
static uint8_t hs_active;
static uint8_t phase;
static uint8_t job, njobs;
static uint8_t jobs[3];
static uint8_t hi;
static uint8_t deliver;
static int16_t shunt_raw;
static uint16_t bus_raw;
static uint32_t cycle_t_us;
static uint8_t cycle_markers;
static uint8_t have_prev;
static uint32_t prev_ticks;
static volatile uint32_t last_alert_ticks;
static uint32_t mk_target;
static volatile uint8_t mk_value;
static volatile uint8_t mk_valid;
volatile uint16_t ina_twi_errors;

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
    TWCR = _BV(TWINT) | _BV(TWSTO) | _BV(TWEN);
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
}

static int probe(void)
{
    uint16_t id = 0;
    twi_reset_slow();
    present = ina_read(REG_MFG_ID, &id) && id == MFG_ID_TI;
    return present;
}

// ---------- streaming ----------

static void arm_marker_read(uint32_t target_ticks)
{
    mk_target = target_ticks;
    mk_valid = 0;
    OCR1A = (uint16_t)target_ticks;
    TIFR1 = _BV(OCF1A);
    TIMSK1 |= _BV(OCIE1A);
}

// Markers at the predicted instant of the next sample.
ISR(TIMER1_COMPA_vect)
{
    uint8_t m = markers_read();
    uint32_t now = clock_now_ticks_isr();
    if ((int32_t)(now - mk_target) >= 0) { // not an earlier 16-bit wrap
        mk_value = m;
        mk_valid = 1;
        TIMSK1 &= (uint8_t)~_BV(OCIE1A);
    }
}

static void start_sequence(uint8_t with_sample)
{
    job = 0;
    njobs = 0;
    if (with_sample) {
        jobs[njobs++] = REG_SHUNT; // first: it is the oldest result
        jobs[njobs++] = REG_BUS;
    }
    jobs[njobs++] = REG_MASK; // last: clears the flag, releases ALERT
    deliver = with_sample;
    twi_busy = 1;
    if (USE_HS && !hs_active) {
        TWBR = (uint8_t)TWBR_400K;
        phase = PH_MASTER_CODE;
    } else {
        phase = PH_ADDR_W;
    }
    // START, or a repeated START while the Hs-mode bus is held
    TWCR = TWCR_GO | _BV(TWSTA);
}

// ALERT fell: a shunt + bus conversion pair is ready.
ISR(TIMER1_CAPT_vect)
{
    uint16_t c = ICR1;
    uint32_t o = clock_ovf_for(c);
    uint32_t t_ticks = clock_ticks_of(o, c);
    uint32_t t_us = clock_us_of(o, c);
    uint32_t nominal = setting.period_us * 2u; // ticks
    uint32_t p = nominal;
    uint32_t back;
    if (twi_busy) { // previous reads still running: this conversion is lost
        sampler_missed();
        return;
    }
    last_alert_ticks = t_ticks;
    if (have_prev) {
        p = t_ticks - prev_ticks;
        if (p < nominal / 2u || p > nominal + nominal / 2u) {
            p = nominal; // a missed alert in between: keep the nominal period
        }
    }
    prev_ticks = t_ticks;
    have_prev = 1;
    back = (p >> 1) + (p >> back_shift); // ticks from the sample's instant to T
    cycle_t_us = t_us - back / 2u;
    cycle_markers = mk_valid ? mk_value : markers_read();
    arm_marker_read(t_ticks + p - back);
    start_sequence(1);
}

static void fail(void)
{
    TWCR = _BV(TWINT) | _BV(TWSTO) | _BV(TWEN); // releases the bus, leaves Hs-mode
    hs_active = 0;
    twi_busy = 0;
    ina_twi_errors++;
    if (deliver) {
        sampler_missed();
    }
}

ISR(TWI_vect)
{
    uint8_t st = TWSR & 0xF8;
    switch (st) {
    case 0x08: // START
    case 0x10: // repeated START
        TWDR = phase == PH_MASTER_CODE ? HS_MASTER_CODE : (phase == PH_ADDR_R ? SLA_R : SLA_W);
        TWCR = TWCR_GO;
        break;
    case 0x20: // address NACK: expected for the Hs master code only
        if (phase != PH_MASTER_CODE) {
            fail();
            break;
        }
        TWBR = (uint8_t)TWBR_FAST;
        hs_active = 1;
        phase = PH_ADDR_W;
        TWCR = TWCR_GO | _BV(TWSTA);
        break;
    case 0x18: // SLA+W ACK: register pointer
        phase = PH_PTR;
        TWDR = jobs[job];
        TWCR = TWCR_GO;
        break;
    case 0x28: // pointer sent: repeated START to read
        phase = PH_ADDR_R;
        TWCR = TWCR_GO | _BV(TWSTA);
        break;
    case 0x40: // SLA+R ACK: first byte, ACK it
        phase = PH_READ;
        TWCR = TWCR_GO | _BV(TWEA);
        break;
    case 0x50: // first byte in: second byte, NACK it
        hi = TWDR;
        TWCR = TWCR_GO;
        break;
    case 0x58: { // second byte in
        uint16_t v = (uint16_t)((uint16_t)hi << 8 | TWDR);
        uint8_t reg = jobs[job];
        if (reg == REG_SHUNT) {
            shunt_raw = (int16_t)v;
        } else if (reg == REG_BUS) {
            bus_raw = v;
        }
        if (++job < njobs) {
            phase = PH_ADDR_W;
            TWCR = TWCR_GO | _BV(TWSTA);
            break;
        }
        if (USE_HS) {
            TWCR = _BV(TWEN); // hold the bus (TWINT stays set), no interrupt
        } else {
            TWCR = _BV(TWINT) | _BV(TWSTO) | _BV(TWEN);
        }
        if (deliver) {
            cp_sample s;
            s.t_us = cycle_t_us;
            s.current = shunt_raw;
            s.bus = bus_raw;
            s.markers = cycle_markers;
            sampler_push(&s);
        }
        twi_busy = 0;
        break;
    }
    default: // data NACK, arbitration lost, bus error
        fail();
        break;
    }
}

// ---------- front-end interface ----------

uint32_t fe_init(cp_ident *id)
{
    // ALERT: D8 = PB0 = ICP1, open drain: input with pull-up
    DDRB &= (uint8_t)~_BV(PB0);
    PORTB |= _BV(PB0);
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
        bus_raw = 0;
        last_alert_ticks = clock_now_ticks_isr();
        TCCR1B &= (uint8_t)~_BV(ICES1); // falling edge
        TCCR1B |= _BV(ICNC1);           // noise canceler (4 cycles)
        TIFR1 = _BV(ICF1);
        TIMSK1 |= _BV(ICIE1);
    }
    return 1;
}

void fe_stop(void)
{
    uint16_t n = 0;
    TIMSK1 &= (uint8_t) ~(_BV(ICIE1) | _BV(OCIE1A));
    while (twi_busy && ++n) { // a sequence in flight finishes within ~0.2 ms
    }
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        twi_busy = 0;
        hs_active = 0;
    }
    twi_stop_polled(); // leaves Hs-mode
    twi_reset_slow();
}

void fe_poll(void)
{
    // A failed sequence leaves the conversion-ready flag set, so ALERT stays
    // low and no further edge comes: after 4 quiet periods, read Mask/Enable.
    uint32_t now = clock_now_ticks();
    uint32_t last;
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        last = last_alert_ticks;
    }
    if ((uint32_t)(now - last) > setting.period_us * 8u && !twi_busy) {
        ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
        {
            if (!twi_busy && (TIMSK1 & _BV(ICIE1))) {
                last_alert_ticks = now;
                have_prev = 0;
                start_sequence(0);
            }
        }
    }
}

#endif
