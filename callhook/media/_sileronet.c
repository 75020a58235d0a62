/* The Silero VAD network at 8 kHz, one window: _silero.h says what and why. */
#include <math.h>
#include <string.h>

#include "_silero.h"

/* The most (weight row, value) pairs one sum takes: the LSTM's 2 x 128 inputs. */
#define MOST_TERMS (2 * SILERO_UNITS)

/* acc[o] += rows[j][o] * values[j] for each o < n, j in order: each output's additions
 * in the order of the terms, whatever the grouping (four terms a pass over the outputs
 * keep the sums in registers). */
static void accumulate(float *restrict acc, int n, const float *const *rows,
                       const float *values, int terms) {
    int j = 0;
    for (; j + 4 <= terms; j += 4) {
        const float *restrict r0 = rows[j], *restrict r1 = rows[j + 1];
        const float *restrict r2 = rows[j + 2], *restrict r3 = rows[j + 3];
        float v0 = values[j], v1 = values[j + 1], v2 = values[j + 2], v3 = values[j + 3];
        for (int o = 0; o < n; o++) {
            float sum = acc[o];
            sum += r0[o] * v0;
            sum += r1[o] * v1;
            sum += r2[o] * v2;
            sum += r3[o] * v3;
            acc[o] = sum;
        }
    }
    for (; j < terms; j++) {
        const float *restrict r = rows[j];
        float v = values[j];
        for (int o = 0; o < n; o++)
            acc[o] += r[o] * v;
    }
}

/* Adds the term (row, value) unless the value is zero (most are: the layer before is a
 * ReLU), which would add nothing. */
static int term(const float **rows, float *values, int terms, const float *row, float value) {
    if (value == 0.0f)
        return terms;
    rows[terms] = row;
    values[terms] = value;
    return terms + 1;
}

/* y[t][cout] = relu(b + conv1d(x[t][cin], kernel 3, padding 1, stride)); w is
 * [in][tap][out]. */
static int conv_relu(const float *restrict x, int tin, int cin, const float *restrict w,
                     const float *restrict b, int cout, int stride, float *restrict y) {
    const float *rows[3 * 128];
    float values[3 * 128];
    int tout = (tin + 2 - 3) / stride + 1;
    for (int t = 0; t < tout; t++) {
        float *restrict acc = y + t * cout;
        int terms = 0;
        for (int k = 0; k < 3; k++) {
            int at = t * stride + k - 1;
            if (at < 0 || at >= tin)
                continue;
            for (int i = 0; i < cin; i++)
                terms = term(rows, values, terms,
                             w + ((size_t)i * 3 + (size_t)k) * (size_t)cout, x[at * cin + i]);
        }
        memcpy(acc, b, sizeof(float) * (size_t)cout);
        accumulate(acc, cout, rows, values, terms);
        for (int o = 0; o < cout; o++)
            acc[o] = acc[o] > 0.0f ? acc[o] : 0.0f;
    }
    return tout;
}

static float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

float silero_window(const silero_weights *w, const float *input, float *state) {
    enum { ROWS = 2 * SILERO_BINS };
    float padded[SILERO_INPUT + SILERO_PAD];
    float spec[ROWS], magnitude[SILERO_FRAMES * SILERO_BINS];
    float e0[SILERO_FRAMES * 128], e1[2 * 64], e2[64], e3[128];
    float gates[4 * SILERO_UNITS];
    const float *rows[MOST_TERMS];
    float values[MOST_TERMS];

    /* Reflection padding on the right (the model's "reflect" Pad: the edge sample is
     * not repeated). */
    memcpy(padded, input, sizeof(float) * SILERO_INPUT);
    for (int j = 0; j < SILERO_PAD; j++)
        padded[SILERO_INPUT + j] = input[SILERO_INPUT - 2 - j];

    /* The STFT as a strided convolution, then each bin's magnitude. */
    for (int t = 0; t < SILERO_FRAMES; t++) {
        memset(spec, 0, sizeof spec);
        const float *frame = padded + t * SILERO_HOP;
        int terms = 0;
        for (int k = 0; k < SILERO_TAPS; k++)
            terms = term(rows, values, terms, w->basis + k * ROWS, frame[k]);
        accumulate(spec, ROWS, rows, values, terms);
        for (int f = 0; f < SILERO_BINS; f++) {
            float re = spec[f], im = spec[SILERO_BINS + f];
            magnitude[t * SILERO_BINS + f] = sqrtf(re * re + im * im);
        }
    }

    /* The encoder: four convolutions with ReLU, 4 frames down to 1. */
    int t0 = conv_relu(magnitude, SILERO_FRAMES, SILERO_BINS, w->w0, w->b0, 128, 1, e0);
    int t1 = conv_relu(e0, t0, 128, w->w1, w->b1, 64, 2, e1);
    int t2 = conv_relu(e1, t1, 64, w->w2, w->b2, 64, 2, e2);
    conv_relu(e2, t2, 64, w->w3, w->b3, 128, 1, e3);

    /* One LSTM step (PyTorch's gate order: input, forget, cell, output). */
    float *h = state, *c = state + SILERO_UNITS;
    memcpy(gates, w->bias, sizeof gates);
    int terms = 0;
    for (int j = 0; j < SILERO_UNITS; j++)
        terms = term(rows, values, terms, w->wih + j * 4 * SILERO_UNITS, e3[j]);
    for (int j = 0; j < SILERO_UNITS; j++)
        terms = term(rows, values, terms, w->whh + j * 4 * SILERO_UNITS, h[j]);
    accumulate(gates, 4 * SILERO_UNITS, rows, values, terms);
    float out = w->bout;
    for (int j = 0; j < SILERO_UNITS; j++) {
        float i = sigmoid(gates[j]);
        float f = sigmoid(gates[SILERO_UNITS + j]);
        float g = tanhf(gates[2 * SILERO_UNITS + j]);
        float o = sigmoid(gates[3 * SILERO_UNITS + j]);
        float cell = f * c[j] + i * g;
        float hidden = o * tanhf(cell);
        c[j] = cell;
        h[j] = hidden;
        /* The decoder: ReLU, a 1x1 convolution to one channel, the sigmoid. */
        if (hidden > 0.0f)
            out += w->wout[j] * hidden;
    }
    return sigmoid(out);
}
