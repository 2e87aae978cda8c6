// A0 front end: a current-sense amplifier's output on ADC0.
//
// The ADC runs free (auto-trigger source "free running"): one conversion per
// 13 ADC clocks, back to back. Each sample is the mean of k consecutive
// conversions (a boxcar over the whole sample period, so nothing between
// samples is aliased away); cp_a0_pick chooses the ADC clock (F_CPU/32,
// /64 or /128) and k. The default, 12,821 S/s, is F_CPU/32 (a conversion
// every 26 us) with k = 3.
//
// The conversion handler runs up to 38,000 times a second, so it is written
// by hand and keeps its state in reserved registers (fixed_regs.h): 25 cycles
// with entry and exit for most conversions, ~110 for the one that completes a
// sample, which it queues raw: {note, sum, PIND} in a 256-byte ring. It keeps
// interrupts off for at most ~45 cycles (marker edges are timestamped within
// a few us) and survives a neighbour that delays it past the next conversion
// (see the handler).
//
// Timing: conversion i+1 starts when conversion i ends and samples its input
// 1.5 ADC clocks later. Conversion ends lie on an exact grid (13 ADC clocks =
// conv_ticks Timer1 ticks apart, a fixed phase against Timer1: both count the
// same 16 MHz clock), so the handler only notes TCNT1 (16 bits) when the
// sample's middle conversion starts, and the main loop keeps a 48-bit grid
// point that it advances by k conversions per sample and snaps onto each note:
// a note arrives a fixed number of ticks after its conversion ended (its
// "latency", A0_NOTE_TICKS_*) or later if other handlers delayed it, never
// sooner, and less than a conversion later. So the grid point is the latest
// conversion end at least that latency before the note: interrupt latency does
// not reach t_us, and a lost conversion (the handler delayed by more than a
// conversion) or a sample dropped on a full ring moves the grid by whole
// conversions. A sample's t_us is the sampling instant of its middle
// conversion (plus half a conversion for even k: the mean instant of its k
// conversions); its markers are read when that conversion starts.
//
// The bus voltage is not measured: bus = 0, bus_lsb_uV = 0, and the host
// uses bus_nominal_mV (BUS_NOMINAL_MV, or SET_CAL's optional third field).
#include "fw_config.h"

#if CP_FRONT_END == CP_FE_ID_A0

#include <avr/interrupt.h>
#include <avr/io.h>
#include <util/atomic.h>

#include "clock.h"
#include "cp_protocol.h"
#include "cp_rate.h"
#include "frontend.h"
#include "ram_layout.h"
#include "sampler.h"
#include "uart.h"

// Ticks (0.5 us) from a conversion's end to the handler's TCNT1 read when
// nothing delays it: ~23 cycles with the vector when the middle conversion
// is not the sample's first (k >= 3), ~55 when it is (k <= 2: the handler
// that completes the previous sample reads it).
// Calibrated in the simavr rig against its sample-and-hold log
// (benchmarks/rig.py: t_us minus the rig's instant).
#ifndef A0_NOTE_TICKS_MID
#define A0_NOTE_TICKS_MID 3
#endif
#ifndef A0_NOTE_TICKS_END
#define A0_NOTE_TICKS_END 7
#endif

// One raw sample in the ring: 8-byte records (32 of them, 2.5 ms at the
// default rate), so a record never wraps and is read with fixed offsets.
typedef struct {
    uint16_t note;   // TCNT1 when its middle conversion started
    uint16_t sum;    // its k conversions
    uint8_t pind;    // PIND then
    uint8_t pad[3];
} raw_sample;
#define RAW_BYTES 8

static cp_a0_setting setting;
static uint16_t recip;      // cp_a0_recip(k)
static uint16_t step_ticks; // k conversions
static uint16_t off_ticks;  // grid point to the sample's instant
static uint8_t note_min;    // A0_NOTE_TICKS_MID or _END for this k

// shared with the handler (extern "C": named in its assembly)
extern "C" {
volatile uint8_t a0_head, a0_tail; // ring indices (head: handler, tail: main loop)
uint8_t a0_k;                      // conversions per sample
uint8_t a0_mid_cnt;                // r8 value after which the middle conversion runs
volatile uint16_t a0_note;         // TCNT1 when the middle conversion started
volatile uint8_t a0_mk;            // PIND then
uint8_t a0_done[3];                // the completed sample's note and PIND, aside
volatile uint8_t a0_skip;          // k <= 2: drop the first sample (fe_start)
}

// main loop: the grid point (Timer1 tick, 48 bits) of the sample last popped
static uint32_t grid_ovf;
static uint16_t grid_tc;
static uint8_t grid_valid;
#if A0_DEBUG_BUS
static uint16_t regrid_count; // notes that moved the grid by whole conversions
#endif

static void choose(uint32_t req_hz)
{
    uint8_t mid_index;
    uint16_t adc_clk_ticks;
    cp_a0_pick(F_CPU, req_hz, A0_MAX_RATE_HZ, &setting);
    mid_index = (uint8_t)((setting.k - 1u) / 2u);
    a0_k = setting.k;
    a0_mid_cnt = (uint8_t)(setting.k - mid_index);
    note_min = a0_mid_cnt == setting.k ? A0_NOTE_TICKS_END : A0_NOTE_TICKS_MID;
    step_ticks = (uint16_t)(setting.conv_ticks * setting.k);
    // sampling instant: 1.5 ADC clocks after the grid point; even k: plus
    // half a conversion, the mean instant of the k conversions
    adc_clk_ticks = (uint16_t)(setting.conv_ticks / 13u);
    off_ticks = (uint16_t)(3u * adc_clk_ticks / 2u +
                           ((setting.k & 1u) ? 0u : setting.conv_ticks / 2u));
    recip = cp_a0_recip(setting.k);
}

// r6:r7 sum, r8 conversions still to come, r9 SREG, r10:r11 scratch.
//
// Interrupts stay off while those registers are in use: most conversions
// take 25 cycles with entry and exit, the middle one 37. The handler that
// completes a sample moves SREG and the sum to the stack, resets r6..r8 for
// the next sample, and only then enables interrupts to queue the record: a
// neighbour that delays it (the receive handler, bytes every 5 us while the
// host sends a command) cannot make the next conversion's handler, nested in
// it, corrupt the sample.
ISR(ADC_vect, ISR_NAKED)
{
    __asm__ __volatile__(
        "in r9, __SREG__\n\t"
        "lds r10, %[adcl]\n\t"
        "lds r11, %[adch]\n\t"
        "add r6, r10\n\t"
        "adc r7, r11\n\t"
        "dec r8\n\t"
        "breq 2f\n\t"
        "lds r10, a0_mid_cnt\n\t"
        "cp r8, r10\n\t"
        "breq 3f\n\t"
        "out __SREG__, r9\n\t"
        "reti\n"
        // the sample's middle conversion has just started (k >= 3): its time
        "3:\n\t"
        "lds r10, %[tcntl]\n\t" // interrupts off: TEMP is not shared with the edge handler
        "lds r11, %[tcnth]\n\t"
        "sts a0_note, r10\n\t"
        "sts a0_note+1, r11\n\t"
        "in r10, %[pind]\n\t"
        "sts a0_mk, r10\n\t"
        "out __SREG__, r9\n\t"
        "reti\n"
        // the sample is complete
        "2:\n\t"
        "push r9\n\t" // SREG, on the stack: r9..r11 are the next handler's
        "push r24\n\t"
        "push r25\n\t"
        "movw r24, r6\n\t" // the sum
        "clr r6\n\t"
        "clr r7\n\t"
        "lds r8, a0_k\n\t"
        // this sample's note and PIND, aside: once interrupts are on, the next
        // conversion's handler may take the next sample's
        "lds r10, a0_note\n\t"
        "sts a0_done, r10\n\t"
        "lds r10, a0_note+1\n\t"
        "sts a0_done+1, r10\n\t"
        "lds r10, a0_mk\n\t"
        "sts a0_done+2, r10\n\t"
        "sei\n\t"
        "push r30\n\t"
        "push r31\n\t"
        "lds r30, a0_mid_cnt\n\t"
        "cp r8, r30\n\t"
        "brne 4f\n\t"
        // k <= 2: the next sample's middle conversion started as this one ended
        "cli\n\t" // TCNT1's high byte goes through TEMP, shared with the edge handler
        "lds r30, %[tcntl]\n\t"
        "lds r31, %[tcnth]\n\t"
        "sei\n\t"
        "sts a0_note, r30\n\t"
        "sts a0_note+1, r31\n\t"
        "in r30, %[pind]\n\t"
        "sts a0_mk, r30\n"
        "4:\n\t"
        // k <= 2, the first sample after START: no note was taken for it (its
        // middle conversion began with START); dropped unseen, uncounted
        "lds r30, a0_skip\n\t"
        "tst r30\n\t"
        "breq 12f\n\t"
        "clr r30\n\t"
        "sts a0_skip, r30\n\t"
        "rjmp 6f\n"
        "12:\n\t"
        // queue {note, sum, PIND} unless the ring is full
        "lds r30, a0_head\n\t"
        "lds r31, a0_tail\n\t"
        "subi r31, 8\n\t"
        "cp r30, r31\n\t"
        "breq 8f\n\t"
        "ldi r31, hi8(%[ring])\n\t"
        "std Z+2, r24\n\t"
        "std Z+3, r25\n\t"
        "lds r24, a0_done\n\t"
        "st Z, r24\n\t"
        "lds r24, a0_done+1\n\t"
        "std Z+1, r24\n\t"
        "lds r24, a0_done+2\n\t"
        "std Z+4, r24\n\t"
        "subi r30, lo8(-8)\n\t"
        "sts a0_head, r30\n\t" // published after its bytes
        "rjmp 7f\n"
        "8:\n\t" // ring full: counted, not queued
        "lds r24, %[drop]\n\t"
        "subi r24, 0xff\n\t"
        "sts %[drop], r24\n\t"
        "lds r24, %[drop]+1\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[drop]+1, r24\n\t"
        "lds r24, %[drop]+2\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[drop]+2, r24\n\t"
        "lds r24, %[drop]+3\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[drop]+3, r24\n"
        "7:\n\t"
        "lds r24, %[tot]\n\t"
        "subi r24, 0xff\n\t"
        "sts %[tot], r24\n\t"
        "lds r24, %[tot]+1\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[tot]+1, r24\n\t"
        "lds r24, %[tot]+2\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[tot]+2, r24\n\t"
        "lds r24, %[tot]+3\n\t"
        "sbci r24, 0xff\n\t"
        "sts %[tot]+3, r24\n"
        "6:\n\t"
        "cli\n\t" // no handler can nest now: r9 may carry SREG back
        "pop r31\n\t"
        "pop r30\n\t"
        "pop r25\n\t"
        "pop r24\n\t"
        "pop r9\n\t"
        "out __SREG__, r9\n\t"
        "reti\n\t"
        :
        : [adcl] "i"(_SFR_MEM_ADDR(ADCL)), [adch] "i"(_SFR_MEM_ADDR(ADCH)),
          [tcntl] "i"(_SFR_MEM_ADDR(TCNT1L)), [tcnth] "i"(_SFR_MEM_ADDR(TCNT1H)),
          [pind] "I"(_SFR_IO_ADDR(PIND)), [tot] "i"(&samples_total),
          [drop] "i"(&samples_dropped), [ring] "i"(ram.a0_ring));
}

// main loop: the frame being filled, low 16 bits of its first sample's tick
static uint16_t frame_t0_tc;
// the sample popped last (by any path): its t_us, and the low 16 bits of its
// tick, from which the next frame's first t_us follows without 32-bit work
static uint32_t last_us;
static uint16_t last_tc;

static inline uint16_t mean_of(uint16_t sum, uint8_t k)
{
    if (k == 3) { // the default: round(sum / 3) = floor((2 sum + 3) * 10923 / 2^16)
        return (uint16_t)(((uint32_t)(uint16_t)(2u * sum + 3u) * 10923u) >> 16);
    }
    return cp_a0_mean(sum, k, recip);
}

static inline void put_sample(uint8_t *out, uint16_t dt, const raw_sample *r, uint8_t k)
{
    uint16_t mean = mean_of(r->sum, k);
    out[0] = (uint8_t)dt;
    out[1] = (uint8_t)(dt >> 8);
    out[2] = (uint8_t)mean;
    out[3] = (uint8_t)(mean >> 8);
#if A0_DEBUG_BUS == 1
    out[4] = (uint8_t)r->note; // debug builds: the handler's raw note
    out[5] = (uint8_t)(r->note >> 8);
#elif A0_DEBUG_BUS == 2
    out[4] = (uint8_t)regrid_count;
    out[5] = (uint8_t)(regrid_count >> 8);
#else
    out[4] = 0; // bus not measured
    out[5] = 0;
#endif
    out[6] = (uint8_t)((r->pind >> MARKER_SHIFT) & MARKER_MASK);
}

// One raw sample the quick loop below leaves alone: the frame's first (its
// 32-bit time), or one whose note is outside [note_min, note_min + conv) of
// the predicted grid point (the first note, a lost conversion, dropped
// samples, a late first note). Returns 1 if popped, CP_POP_FAR if it is too
// far from the frame's first sample (left queued), 0 if none is queued.
static uint8_t __attribute__((noinline)) pop_slow(uint8_t *out, uint32_t *t0_us, uint8_t lead)
{
    uint8_t t = a0_tail;
    const raw_sample *r = (const raw_sample *)(ram.a0_ring + t);
    uint32_t ovf = grid_ovf;
    uint16_t g = grid_tc, note, tc;
    uint32_t t_us;
    int16_t late;
    if (t == a0_head) {
        return 0;
    }
    CP_RING_BARRIER();
    note = r->note;
    if (grid_valid) {
        uint16_t g2 = (uint16_t)(g + step_ticks);
        if (g2 < g) {
            ovf++;
        }
        g = g2;
    }
    late = (int16_t)(uint16_t)(note - g);
    if (!grid_valid || late < -(int16_t)setting.conv_ticks || late > 0x4000) {
        // the first note (or the grid is lost): its overflow count from the
        // clock (a note is at most a few ms old), the grid point one latency
        // before it
        uint16_t now;
        ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
        {
            now = TCNT1;
            ovf = clock_ovf_for(now);
        }
        if (note > now) {
            ovf--;
        }
        if (note < note_min) {
            ovf--;
        }
        g = (uint16_t)(note - note_min);
    } else if (late < (int16_t)note_min) {
        // sooner than the handler can: the grid was late (its first note was
        // delayed), or it ran a conversion ahead
        uint16_t d = (uint16_t)((int16_t)note_min - late);
        if (g < d) {
            ovf--;
        }
        g = (uint16_t)(g - d);
    } else {
        // a conversion's time or more late: conversions or samples lost
        while (late >= (int16_t)(note_min + setting.conv_ticks)) {
            uint16_t g2 = (uint16_t)(g + setting.conv_ticks);
            if (g2 < g) {
                ovf++;
            }
            g = g2;
            late = (int16_t)(late - (int16_t)setting.conv_ticks);
#if A0_DEBUG_BUS
            regrid_count++;
#endif
        }
    }
    tc = (uint16_t)(g + off_ticks);
    t_us = clock_us_of(ovf + (tc < g ? 1u : 0u), tc);
    if (lead) {
        *t0_us = t_us;
    } else if ((uint32_t)(t_us - *t0_us) > 0xFFFFu) {
        return CP_POP_FAR; // dt_us would not fit: the next frame's first
    }
    grid_ovf = ovf;
    grid_tc = g;
    grid_valid = 1;
    if (lead) {
        frame_t0_tc = tc;
    }
    last_us = t_us;
    last_tc = tc;
    put_sample(out, (uint16_t)(t_us - *t0_us), r, setting.k);
    CP_RING_BARRIER();
    a0_tail = (uint8_t)(t + RAW_BYTES);
    return 1;
}

uint8_t fe_pop_samples(uint8_t *out, uint8_t max, uint32_t *t0_us, uint8_t first)
{
    uint8_t n = 0;
    if (first) {
        uint8_t r = pop_slow(out, t0_us, 1);
        if (r != 1) {
            return 0;
        }
        out += CP_SAMPLE_BYTES;
        n = 1;
    }
    while (n < max) {
        // The quick loop: the grid advances by k conversions per sample and
        // the note confirms it. Locals only; state written back at the end.
        uint8_t t = a0_tail;
        const uint8_t h = a0_head, k = setting.k, nmin = note_min;
        const uint16_t step = step_ticks, conv = setting.conv_ticks, t0 = frame_t0_tc;
        const uint16_t base = (uint16_t)(off_ticks - t0 + (t0 & 1u)); // dt = (g + base) / 2
        uint16_t g = grid_tc, dt = 0;
        uint8_t wraps = 0, any = 0;
        while (n < max && t != h) {
            const raw_sample *r = (const raw_sample *)(ram.a0_ring + t);
            uint16_t g2 = (uint16_t)(g + step);
            CP_RING_BARRIER();
            if ((uint16_t)(r->note - g2 - nmin) >= conv) {
                break; // not where the grid says: pop_slow decides
            }
            if (g2 < g) {
                wraps++;
            }
            g = g2;
            // floor(T / 2) - floor(T0 / 2) from 16-bit ticks: a frame spans
            // at most 3 steps (< 40,000 ticks at the slowest rate)
            dt = (uint16_t)((uint16_t)(g + base) >> 1);
            put_sample(out, dt, r, k);
            any = 1;
            t = (uint8_t)(t + RAW_BYTES);
            out += CP_SAMPLE_BYTES;
            n++;
        }
        grid_tc = g;
        grid_ovf += wraps;
        if (any) {
            last_us = *t0_us + dt;
            last_tc = (uint16_t)(g + off_ticks);
        }
        CP_RING_BARRIER();
        a0_tail = t; // the slots are free again
        if (n == max || t == a0_head) {
            break;
        }
        {
            uint8_t r = pop_slow(out, t0_us, 0);
            if (r != 1) {
                return (uint8_t)(n | (r & CP_POP_FAR));
            }
            out += CP_SAMPLE_BYTES;
            n++;
        }
    }
    return n;
}

uint8_t fe_send_samples(uint16_t seq)
{
    // A whole SAMPLES frame, built here and CRC'd while uart_send_crc copies
    // it into the transmit ring: the path almost every sample takes.
    uint8_t f[CP_SAMPLES_FRAME_MAX - 2]; // without its CRC
    uint8_t *p = f + 11;
    const uint8_t t = a0_tail, k = setting.k, nmin = note_min;
    const uint16_t step = step_ticks, conv = setting.conv_ticks, off = off_ticks;
    uint16_t g = grid_tc, tc = 0, tc0 = 0, dt = 0;
    uint32_t t0 = 0;
    uint8_t wraps = 0, i;
    if ((uint8_t)(a0_head - t) < CP_SAMPLES_MAX * RAW_BYTES) {
        return CP_SENT_WAIT;
    }
    if (!grid_valid) {
        return CP_SENT_SLOW;
    }
    CP_RING_BARRIER();
    for (i = 0; i < CP_SAMPLES_MAX; i++) {
        const raw_sample *r = (const raw_sample *)(ram.a0_ring + (uint8_t)(t + RAW_BYTES * i));
        uint16_t g2 = (uint16_t)(g + step);
        if ((uint16_t)(r->note - g2 - nmin) >= conv) {
            return CP_SENT_SLOW; // nothing taken yet
        }
        if (g2 < g) {
            wraps++;
        }
        g = g2;
        tc = (uint16_t)(g + off);
        if (i == 0) {
            // floor(T / 2) - floor(T_last / 2) from 16-bit ticks
            t0 = last_us + (uint16_t)((uint16_t)(tc - last_tc + (last_tc & 1u)) >> 1);
            tc0 = tc;
        } else {
            dt = (uint16_t)((uint16_t)(tc - tc0 + (tc0 & 1u)) >> 1);
        }
        put_sample(p, dt, r, k);
        p += CP_SAMPLE_BYTES;
    }
    f[0] = CP_SYNC0;
    f[1] = CP_SYNC1;
    f[2] = CP_T_SAMPLES;
    f[3] = (uint8_t)(1u + CP_SAMPLE_BYTES * CP_SAMPLES_MAX);
    f[4] = (uint8_t)seq;
    f[5] = (uint8_t)(seq >> 8);
    f[6] = (uint8_t)t0;
    f[7] = (uint8_t)(t0 >> 8);
    f[8] = (uint8_t)(t0 >> 16);
    f[9] = (uint8_t)(t0 >> 24);
    f[10] = CP_SAMPLES_MAX;
    uart_send_crc(f, sizeof f);
    grid_tc = g;
    grid_ovf += wraps;
    last_us = t0 + dt;
    last_tc = tc;
    CP_RING_BARRIER();
    a0_tail = (uint8_t)(t + CP_SAMPLES_MAX * RAW_BYTES);
    return CP_SENT_FRAME;
}

int fe_pop_sample(cp_sample *s)
{
    uint8_t b[CP_SAMPLE_BYTES];
    uint32_t t0;
    if (!(fe_pop_samples(b, 1, &t0, 1) & ~CP_POP_FAR)) {
        return 0;
    }
    s->t_us = t0;
    s->current = (int16_t)(b[2] | (uint16_t)b[3] << 8);
    s->bus = (uint16_t)(b[4] | (uint16_t)b[5] << 8);
    s->markers = b[6];
    return 1;
}

uint32_t fe_init(cp_ident *id)
{
    DDRC &= (uint8_t)~_BV(PC0);
    PORTC &= (uint8_t)~_BV(PC0);
    DIDR0 |= _BV(ADC0D); // no digital input buffer on the analog pin
    ADCSRA = 0;
    ADMUX = _BV(REFS0); // AVcc reference, ADC0, right adjusted
    ADCSRB = 0;         // auto trigger: free running
    a0_head = a0_tail = 0;
    choose(A0_DEFAULT_RATE_HZ);
    id->front_end = CP_FE_A0;
    id->flags = 0;
    id->rate_hz = setting.rate_hz;
    id->shunt_uohm = (uint32_t)A0_SHUNT_UOHM;
    id->current_lsb_nA = (int32_t)A0_CURRENT_LSB_NA;
    id->bus_lsb_uV = 0;
    id->bus_nominal_mV = BUS_NOMINAL_MV;
    return 0; // current_lsb_nA cannot be derived from the shunt alone
}

uint32_t fe_set_rate(uint32_t req_hz)
{
    choose(req_hz);
    return setting.rate_hz;
}

int fe_start(void)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        ADCSRA = _BV(ADIF); // off, stale flag cleared
        a0_tail = a0_head;
        grid_valid = 0;
#if A0_DEBUG_BUS
        regrid_count = 0;
#endif
        // the handler's registers: sum 0, k conversions to come
        __asm__ __volatile__("clr r6\n\tclr r7\n\tmov r8, %0" : : "r"(a0_k));
        a0_skip = a0_mid_cnt == a0_k; // k <= 2: see the handler
        ADCSRB = 0;
        ADMUX = _BV(REFS0);
        ADCSRA = (uint8_t)(_BV(ADEN) | _BV(ADSC) | _BV(ADATE) | _BV(ADIE) | setting.adps);
    }
    return 1;
}

void fe_stop(void)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        ADCSRA = _BV(ADIF); // disable and drop a pending interrupt
    }
}

void fe_poll(void)
{
}

#endif
