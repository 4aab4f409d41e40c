#!/usr/bin/env python3
"""make_raw_corpus.py: builds the data-quality experiment's corpora from KJV + Debian fortunes.

Writes to --out: heldout.txt (clean documents withheld before any injection), pool.txt (the
clean training documents), raw.txt (the pool plus injected exact duplicates, near duplicates,
random-byte documents and boilerplate lines, shuffled) and manifest.json (what was injected).
Documents are separated by a blank line. Everything is seeded.
"""
import argparse
import json
import os
import random
import re

BOILERPLATE_LINES = [
    b"This site uses cookies to improve your experience. Read our Cookie Policy.",
    b"Copyright (c) 2024 Example Media Group. All rights reserved. Terms of Use | Privacy Policy",
    b"Please enable JavaScript in your browser to view this content.",
    b"By continuing to browse you agree to our use of cookies and our Terms of Use.",
]
BOILERPLATE_DOC_LINES = [
    b"Subscribe to our newsletter for the latest updates!",
    b"Click here to read more.",
    b"Share on Facebook | Share on Twitter | Share by Email",
    b"Sign in | Register | Forgot your password?",
    b"Home | About | Contact | Sitemap",
]


def split_docs(data, fortune):
    sep = rb"\n(?:[ \t]*\n|%\n)+" if fortune else rb"\n(?:[ \t]*\n)+"
    return [d.strip(b"\n") for d in re.split(sep, data) if d.strip()]


def clean_enough(doc):
    """Held-out documents: printable UTF-8 with at least 3 words (no noise of their own)."""
    try:
        text = doc.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if any(ord(c) < 32 and c not in "\t\n" for c in text):
        return False
    return len(text.split()) >= 3


def edit_words(doc, rate, rng, vocab):
    out = []
    for w in doc.split(b" "):
        if rng.random() >= rate:
            out.append(w)
            continue
        op = rng.randrange(3)
        if op == 0:
            out.append(rng.choice(vocab))
        elif op == 2:
            out += [w, rng.choice(vocab)]
    return b" ".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kjv", required=True)
    ap.add_argument("--fortunes", default="/usr/share/games/fortunes")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--pool-bytes", type=int, default=600_000)
    ap.add_argument("--heldout-bytes", type=int, default=33_000)
    ap.add_argument("--exact-dup-fraction", type=float, default=0.30)
    ap.add_argument("--near-dup-fraction", type=float, default=0.10)
    ap.add_argument("--noise-fraction", type=float, default=0.05)
    ap.add_argument("--boilerplate-fraction", type=float, default=0.20)
    a = ap.parse_args()
    rng = random.Random(a.seed)

    docs = [(b"kjv", d) for d in split_docs(open(a.kjv, "rb").read(), False)]
    if os.path.isdir(a.fortunes):
        for name in sorted(os.listdir(a.fortunes)):
            p = os.path.join(a.fortunes, name)
            if os.path.isfile(p) and "." not in name:
                docs += [(b"fortune", d) for d in split_docs(open(p, "rb").read(), True)]
    rng.shuffle(docs)
    heldout, pool, n_held, n_pool = [], [], 0, 0
    for _, d in docs:
        if n_held < a.heldout_bytes:
            if clean_enough(d):
                heldout.append(d)
                n_held += len(d) + 2
        elif n_pool < a.pool_bytes:
            pool.append(d)
            n_pool += len(d) + 2
        else:
            break
    vocab = [w for d in pool[:2000] for w in d.split() if w.isalpha()]

    # Injections. With n pool documents, near and noise counts are fractions of n and exact
    # duplicates make up --exact-dup-fraction of all raw documents.
    n = len(pool)
    raw = []
    n_boiler = 0
    for d in pool:
        if rng.random() < a.boilerplate_fraction:
            lines = rng.sample(BOILERPLATE_LINES, rng.randint(1, 2))
            d = b"\n".join(([d] + lines) if rng.random() < 0.5 else (lines + [d]))
            n_boiler += 1
        raw.append(d)
    # Near copies: documents of >= 40 words with 0.5-3% of their words edited (at least one).
    long_docs = [d for d in pool if len(d.split()) >= 40]
    near = []
    for _ in range(int(a.near_dup_fraction * n)):
        src = rng.choice(long_docs)
        copy = src
        while copy == src:
            copy = edit_words(src, rng.uniform(0.005, 0.03), rng, vocab)
        near.append(copy)
    noise = []
    for i in range(int(a.noise_fraction * n)):
        if i % 2 == 0:  # random bytes
            noise.append(bytes(rng.randrange(256) for _ in range(rng.randint(200, 2000))))
        else:  # boilerplate-only page
            lines = [rng.choice(BOILERPLATE_DOC_LINES) for _ in range(rng.randint(3, 8))]
            noise.append(b"\n".join(lines))
    total = (len(raw) + len(near) + len(noise)) / (1 - a.exact_dup_fraction)
    n_exact = int(round(total * a.exact_dup_fraction))
    popular = rng.sample(range(n), max(1, n // 50))  # half the copies come from 2% of documents
    exact = [raw[rng.choice(popular) if i % 2 else rng.randrange(n)] for i in range(n_exact)]
    everything = raw + near + noise + exact
    rng.shuffle(everything)

    os.makedirs(a.out, exist_ok=True)
    for name, ds in (("heldout.txt", heldout), ("pool.txt", pool), ("raw.txt", everything)):
        with open(os.path.join(a.out, name), "wb") as f:
            f.write(b"\n\n".join(ds) + b"\n")
    manifest = {
        "seed": a.seed, "heldout_docs": len(heldout), "heldout_bytes": sum(map(len, heldout)),
        "pool_docs": n, "pool_bytes": sum(map(len, pool)), "raw_docs": len(everything),
        "raw_bytes": sum(map(len, everything)), "exact_duplicates": n_exact,
        "near_duplicates": len(near), "noise_docs": len(noise),
        "docs_with_boilerplate_lines": n_boiler,
    }
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(json.dumps(manifest))


if __name__ == "__main__":
    main()
