// The web phone's audio, on the browser's audio thread (an AudioWorklet).
//
// Microphone in: the context's samples are resampled to 8 kHz and posted to
// the page 160 at a time (one 20 ms RTP frame). Loudspeaker out: the page
// posts 8 kHz frames received from callhook; they wait in a small jitter
// buffer (playing starts once 40 ms are queued; more than 200 ms queued and the
// oldest are dropped, so latency cannot build up) and are resampled to the
// context's rate. Linear interpolation both ways: telephone audio is 300-3400 Hz.
"use strict";

const FRAME = 160; // samples of 8 kHz audio in 20 ms
const START_AFTER = 2 * FRAME;
const MAX_QUEUED = 10 * FRAME;

class PhoneProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.ratio = sampleRate / 8000; // context samples per 8 kHz sample
    this.pos = 0; // where the next 8 kHz sample is taken, in [last, this block] samples
    this.last = 0; // the previous block's last sample
    this.frame = new Float32Array(FRAME);
    this.filled = 0;
    this.queue = [];
    this.queued = 0;
    this.head = null;
    this.headPos = 0;
    this.playing = false;
    this.phase = 0;
    this.prev = 0;
    this.cur = 0;
    this.port.onmessage = (e) => {
      this.queue.push(e.data);
      this.queued += e.data.length;
      while (this.queued > MAX_QUEUED) this.queued -= this.queue.shift().length;
    };
  }

  // The next 8 kHz sample received (null: the buffer ran dry).
  nextSample() {
    while (this.head === null || this.headPos >= this.head.length) {
      if (this.queue.length === 0) return null;
      this.head = this.queue.shift();
      this.queued -= this.head.length;
      this.headPos = 0;
    }
    return this.head[this.headPos++];
  }

  capture(x) {
    const n = x.length;
    let p = this.pos;
    while (p < n) {
      const i = Math.floor(p);
      const a = i === 0 ? this.last : x[i - 1];
      const b = x[i];
      this.frame[this.filled++] = a + (b - a) * (p - i);
      if (this.filled === FRAME) {
        this.port.postMessage(this.frame);
        this.frame = new Float32Array(FRAME);
        this.filled = 0;
      }
      p += this.ratio;
    }
    this.pos = p - n;
    this.last = x[n - 1];
  }

  play(out) {
    const buffered = this.queued + (this.head ? this.head.length - this.headPos : 0);
    if (!this.playing && buffered >= START_AFTER) this.playing = true;
    const step = 1 / this.ratio;
    for (let i = 0; i < out.length; i++) {
      if (!this.playing) {
        out[i] = 0;
        continue;
      }
      this.phase += step;
      while (this.phase >= 1) {
        this.phase -= 1;
        const s = this.nextSample();
        if (s === null) {
          this.playing = false; // wait for 40 ms again before playing on
          break;
        }
        this.prev = this.cur;
        this.cur = s;
      }
      out[i] = this.playing ? this.prev + (this.cur - this.prev) * this.phase : 0;
    }
  }

  process(inputs, outputs) {
    const input = inputs[0] && inputs[0][0];
    if (input && input.length) this.capture(input);
    const output = outputs[0];
    if (output && output[0]) {
      this.play(output[0]);
      for (let c = 1; c < output.length; c++) output[c].set(output[0]);
    }
    return true;
  }
}

registerProcessor("phone", PhoneProcessor);
