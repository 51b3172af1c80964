"""Stop strings: matched on the decoded text across token boundaries, in generate, batches and
speculative decoding; the text shown is cut before them."""
import pytest

import minillm
from minillm.generate import generate, stream
from minillm.stopping import cut_at_stop, find_stop, reached_stop, start_text, undecided_length
from tests.helpers import byte_tokenizer


@pytest.fixture(scope="module")
def model():
    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=12, d_model=16,
                              n_layers=2, n_heads=2)
    model = minillm.random_model(cfg, seed=2, dtype="float64", std=0.5)
    model.tokenizer = byte_tokenizer()
    return model


def ends_at(tokenizer, new, stops):
    """How many new tokens a row keeps: up to the one whose text completes a stop string."""
    for n in range(1, len(new) + 1):
        if any(stop in tokenizer.decode(new[:n]) for stop in stops):
            return n
    return len(new)


def test_a_stop_string_split_between_tokens_and_inside_a_character_is_found():
    tokenizer = byte_tokenizer()
    row = start_text(tokenizer, tokenizer.encode("x"))
    pieces = [ord("a"), ord("b"), 0xC3, 0xA9, ord("!")]  # "abé!", é as two byte tokens
    found = [reached_stop(row, t, ["bé"]) for t in pieces]
    assert found == [False, False, False, True, False]  # a match counts once, when it ends
    assert row.text == "abé!"
    prompt_ends_mid_character = [0xC3]
    row = start_text(tokenizer, prompt_ends_mid_character)
    assert not reached_stop(row, 0xA9, ["\ufffd"]) and row.text == "é"


def test_finding_cutting_and_holding_back():
    assert find_stop("one\n\ntwo END", ["END", "\n\n"]) == 3
    assert find_stop("nothing", ["END"]) is None
    assert cut_at_stop("one\n\ntwo", ["\n\n"]) == "one" and cut_at_stop("ab", ["x"]) == "ab"
    assert undecided_length("the EN", ["END"]) == 2  # "EN" may become "END"
    assert undecided_length("the E", ["END", "Eh"]) == 1
    assert undecided_length("the END", ["END"]) == 0  # complete matches are find_stop's
    assert undecided_length("aaa", ["aab"]) == 2
    assert undecided_length("", ["x"]) == 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_ends_with_the_token_that_completes_a_stop_string(model, temperature):
    tokenizer = model.tokenizer
    prompt = tokenizer.encode("Hi there")
    free = generate(model, prompt, max_new_tokens=30, temperature=temperature,
                    seed=3)[len(prompt):]
    text = tokenizer.decode(free)
    stop = text[len(text) // 2:len(text) // 2 + 2]  # two characters from the middle
    n = ends_at(tokenizer, free, [stop])
    assert n < len(free)
    stopped = generate(model, prompt, max_new_tokens=30, temperature=temperature, seed=3,
                       stop_strings=[stop])
    assert stopped == prompt + free[:n]
    assert list(stream(model, prompt, max_new_tokens=30, temperature=temperature, seed=3,
                       stop_strings=[stop])) == free[:n]
    rollout = generate(model, prompt, max_new_tokens=30, temperature=temperature, seed=3,
                       stop_strings=[stop],
                       return_logprobs=True)
    assert rollout.tokens == stopped and len(rollout.logprobs) == n


def test_the_prompt_is_not_searched_and_each_batch_row_stops_alone(model):
    tokenizer = model.tokenizer
    prompts = [tokenizer.encode(p) for p in ("STOP here", "go on", "x")]
    free = generate(model, prompts, max_new_tokens=25, temperature=0)
    stops = ["STOP", tokenizer.decode(free[0][len(prompts[0]):])[3:5]]
    stopped = generate(model, prompts, max_new_tokens=25, temperature=0, stop_strings=stops)
    kept = [ends_at(tokenizer, full[len(p):], stops) for p, full in zip(prompts, free)]
    assert kept[0] < 25  # the first row stops; whether the others do is up to their text
    assert stopped == [full[:len(p) + n] for p, full, n in zip(prompts, free, kept)]


def test_speculative_decoding_stops_on_the_same_string(model):
    prompt = model.tokenizer.encode("Hi there")
    free = generate(model, prompt, max_new_tokens=30, temperature=0)[len(prompt):]
    stop = model.tokenizer.decode(free)[10:12]
    expected = generate(model, prompt, max_new_tokens=30, temperature=0, stop_strings=[stop])
    for draft in ("ngram", model):
        ids, _ = minillm.speculative_generate(model, draft, prompt, max_new_tokens=30, k=3,
                                              temperature=0,
                                              stop_strings=[stop])
        assert ids == expected


def test_stop_strings_need_a_tokenizer_and_a_list(model):
    bare = minillm.random_model(model.config, seed=0)
    with pytest.raises(ValueError, match="stop_strings: this model has no tokenizer"):
        generate(bare, [1, 2], max_new_tokens=5, stop_strings=["x"])
    with pytest.raises(ValueError, match="stop_strings: this model has no tokenizer"):
        minillm.speculative_generate(bare, "ngram", [1, 2], max_new_tokens=5, stop_strings=["x"])
    with pytest.raises(ValueError, match=r"stop_strings: must be a list of strings.*\['END'\]"):
        generate(model, [1, 2], max_new_tokens=5, stop_strings="END")
    with pytest.raises(ValueError, match="stop_strings: must be non-empty strings"):
        stream(model, [1, 2], max_new_tokens=5, stop_strings=["", "x"])
