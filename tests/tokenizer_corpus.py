"""Texts that exercise a tokenizer's corners, shared by the tokenizer peer tests.

Code, numbers and digit runs, whitespace runs of every kind, CJK, Devanagari, Arabic, combining
marks, emoji with modifiers and joiners, contractions in every case, and text that looks like
special tokens (but is not quite).
"""
CORPUS = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n",
    "for (int i = 0; i < 10; ++i) { x[i] += y->z; } // done\n\tif a!=b: pass  # ok\r\n",
    "In 2024, 1234567 people paid $3.50 (\u20ac3,20) each; x  42, y\t\t7.\n",
    " 3.14159 1e-10 0x1F 12,345,678 007 99999999999 \u0663\u0664\u0665 \u00bd \u2167 x\u00b2",
    "I'VE SEEN it's, we'll, THEY'RE don't 'S 'Ll 'D x's \u00e9t\u00e9 na\u00efve "
    "\u0416\u0443\u043a",
    "   spaces   before\n\n\n  and after   \r\n\t \x0b\x0c x\u00a0y \u2003 z "
    "\u3000w\u3001\u3000\u3002",
    "trailing spaces   ",
    "\n\n\n",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e, "
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e\u0964",
    "e\u0301 a\u0308\u0304 \u1100\u1161\u11a8 Z\u0351\u036b\u0343\u036a\u0302 "
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629\u064b",
    "\u65e5\u672c\u8a9e\u3067\u3059\u3002\u4e2d\u6587\u6d4b\u8bd5\uff0c\ud55c\uad6d\uc5b4 "
    "\u30ab\u30bf\u30ab\u30ca\u3072\u3089\u304c\u306a",
    "emoji \U0001f600\U0001f44d\U0001f3fd and a family "
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1eb\U0001f1f7 \u2764\ufe0f",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<|endoftext|><|im_end",
    "<s> </s> <unk> [INST] hi [/INST] <|eot_id|> <|begin_of_text|> <0x0A> <|im_start",
    "!!! ??? ... --- +++ $$$ ~~~ ||| <<<>>> ^^^ `code` @user #tag 100% a_b \\n \" '",
    "ALLCAPS lowercase MiXeD camelCaseWord snake_case_word kebab-case-word HTTPServer",
]
