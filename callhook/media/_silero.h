/* The Silero VAD network at 8 kHz, one window at a time, in plain C (no Python, no
 * allocation): the forward pass of callhook/media/sileronet.py's reference, which says
 * what each step is.  _silero.c is its Python type; the media thread may call it as is.
 *
 * The weights are the model file's, rearranged once (silero_load) so that every inner
 * loop runs over the outputs of one input: a sum the compiler vectorises without
 * reordering any one output's additions (the build keeps -ffp-contract=off).
 */
#ifndef CALLHOOK_SILERO_H
#define CALLHOOK_SILERO_H

/* The model's input: 32 samples of context and a window of 256, on the [-1, 1) scale. */
#define SILERO_INPUT 288
/* Its recurrent state: the LSTM's h (128) then c (128). */
#define SILERO_UNITS 128
#define SILERO_STATE (2 * SILERO_UNITS)

/* The STFT: 128-tap filters, hop 64, 65 bins (real and imaginary rows); the input is
 * padded by reflection with 32 samples on the right, so 4 frames. */
#define SILERO_TAPS 128
#define SILERO_HOP 64
#define SILERO_BINS 65
#define SILERO_PAD 32
#define SILERO_FRAMES 4

typedef struct {
    float basis[SILERO_TAPS * 2 * SILERO_BINS];         /* [tap][row] */
    float w0[SILERO_BINS * 3 * 128], b0[128];           /* [in][tap][out] */
    float w1[128 * 3 * 64], b1[64];
    float w2[64 * 3 * 64], b2[64];
    float w3[64 * 3 * 128], b3[128];
    float wih[SILERO_UNITS * 4 * SILERO_UNITS];         /* [in][gate row] */
    float whh[SILERO_UNITS * 4 * SILERO_UNITS];
    float bias[4 * SILERO_UNITS];                       /* b_ih + b_hh */
    float wout[SILERO_UNITS], bout;
} silero_weights;

/* The probability that the window of `input` is speech; `state` (h then c) is replaced
 * by the state after it.  Thread-safe for distinct states. */
float silero_window(const silero_weights *w, const float *input, float *state);

#endif
