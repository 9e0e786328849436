"""`dsv4 serve` driven by the official openai client: completions and chat, streamed and not,
usage, logprobs, stop strings, logit_bias, allowed_token_ids, bad_words, truncate_prompt_tokens, n choices, seeded
sampling, response_format's JSON constraint, guided_choice and guided_regex, the bad-input answers (401,
404, 400) with the server still serving afterwards, /ping and /version.
Usage: openai_client_e2e.py BASE_URL API_KEY MODEL_NAME."""
import json
import re
import sys
import urllib.error
import urllib.request

import openai

base_url, api_key, model = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=120)


def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


# Models.
ids = [m.id for m in client.models.list().data]
check(ids == [model], f"models: {ids}")

# Completions, not streamed: greedy, usage counts.
prompt = "The quick brown fox"
c = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
text = c.choices[0].text
check(c.choices[0].finish_reason in ("length", "stop"), f"finish_reason {c.choices[0].finish_reason}")
check(c.usage.prompt_tokens > 0 and 0 < c.usage.completion_tokens <= 8, f"usage {c.usage}")
check(c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens, "total_tokens")

# The same request streamed gives the same text (greedy), and the usage chunk comes last.
chunks = list(client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0, stream=True,
                                         stream_options={"include_usage": True}))
streamed = "".join(ch.choices[0].text for ch in chunks if ch.choices)
check(streamed == text, f"streamed {streamed!r} != {text!r}")
check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == c.usage.completion_tokens,
      f"usage chunk {chunks[-1]}")

# Logprobs: one entry per token, each with up to 2 alternatives, all <= 0.
lp = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0, logprobs=2)
logprobs = lp.choices[0].logprobs
check(len(logprobs.token_logprobs) == lp.usage.completion_tokens, f"logprobs {logprobs}")
check(all(v <= 0 for v in logprobs.token_logprobs), "logprob > 0")
check(all(len(alt) <= 2 for alt in logprobs.top_logprobs), "top_logprobs size")

# A stop string taken from the greedy text ends the answer right before it.
long = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0).choices[0].text
stop = next((long[i:i + 2] for i in range(1, len(long) - 1) if long[i:i + 2].strip() and long.find(long[i:i + 2]) == i),
            None)
if stop is not None:
    s = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0, stop=[stop])
    check(s.choices[0].text == long[:long.index(stop)], f"stop {stop!r}: {s.choices[0].text!r} vs {long!r}")
    check(s.choices[0].finish_reason == "stop", f"stop finish_reason {s.choices[0].finish_reason}")

# logit_bias: +100 on one token makes every greedy token that one; the usage's cached_tokens is there.
def post(path, body):
    return json.load(urllib.request.urlopen(urllib.request.Request(
        base_url + path, data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + api_key, "Content-Type": "application/json"})))


token = post("/tokenize", {"model": model, "prompt": " fox"})["tokens"][-1]
piece = post("/detokenize", {"model": model, "tokens": [token]})["prompt"]
biased = client.completions.create(model=model, prompt=prompt, max_tokens=3, temperature=0,
                                   logit_bias={str(token): 100})
check(biased.choices[0].text == piece * 3, f"logit_bias {token} ({piece!r}): {biased.choices[0].text!r}")
check(biased.usage.prompt_tokens_details.cached_tokens == 0, f"cached_tokens {biased.usage}")

# allowed_token_ids (vLLM's): every token, greedy or sampled, is one of the listed ones; an id
# outside the vocabulary is a 400 naming the field.
listed = [token, post("/tokenize", {"model": model, "prompt": " dog"})["tokens"][-1]]
pieces = {post("/detokenize", {"model": model, "tokens": [t]})["prompt"] for t in listed}
for temperature, seed in [(0, None), (1.0, 1), (1.0, 2), (1.0, 3)]:
    r = client.completions.create(model=model, prompt=prompt, max_tokens=5, temperature=temperature, seed=seed,
                                  logprobs=0, extra_body={"allowed_token_ids": listed})
    drawn = r.choices[0].logprobs.tokens
    check(len(drawn) == 5 and set(drawn) <= pieces, f"allowed_token_ids {listed} ({pieces}): {drawn}")
try:
    client.completions.create(model=model, prompt=prompt, max_tokens=2, extra_body={"allowed_token_ids": [10 ** 8]})
    check(False, "an allowed token id outside the vocabulary was accepted")
except openai.BadRequestError as e:
    check("allowed_token_ids" in str(e) and str(10 ** 8) in str(e), f"allowed_token_ids error {e}")

# bad_words (vLLM's): the ban holds against logit_bias's +100 on the same token, greedy or sampled; a
# word of only whitespace is a 400 naming it.
for temperature, seed in [(0, None), (1.0, 1)]:
    r = client.completions.create(model=model, prompt=prompt, max_tokens=3, temperature=temperature, seed=seed,
                                  logprobs=0, logit_bias={str(token): 100}, extra_body={"bad_words": [piece]})
    check(piece not in r.choices[0].logprobs.tokens, f"bad_words {piece!r}: {r.choices[0].logprobs.tokens}")
try:
    client.completions.create(model=model, prompt=prompt, max_tokens=2, extra_body={"bad_words": ["ok", "  "]})
    check(False, "a bad word of only whitespace was accepted")
except openai.BadRequestError as e:
    check("bad_words[1]" in str(e), f"bad_words error {e}")

# truncate_prompt_tokens (vLLM's): the prompt's last k tokens, the same answer as sending them alone.
prompt_ids = post("/tokenize", {"model": model, "prompt": prompt})["tokens"]
cut = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                extra_body={"truncate_prompt_tokens": 2})
alone = client.completions.create(model=model, prompt=prompt_ids[-2:], max_tokens=6, temperature=0)
check(cut.choices[0].text == alone.choices[0].text and cut.usage.prompt_tokens == 2,
      f"truncate_prompt_tokens 2: {cut.choices[0].text!r} vs {alone.choices[0].text!r}, {cut.usage}")

# n choices: greedy ones agree; seeded sampled ones are reproducible one by one (choice i draws
# with seed + i, so choice 1 of seed 7 is choice 0 of seed 8).
g = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0, n=2)
check([ch.index for ch in g.choices] == [0, 1] and g.choices[0].text == g.choices[1].text, f"greedy n=2: {g}")
single = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0)
check(g.usage.completion_tokens == 2 * single.usage.completion_tokens and g.usage.prompt_tokens == single.usage.prompt_tokens,
      f"n=2 usage {g.usage} vs {single.usage}")
two = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0.9, seed=7, n=2)
one = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0.9, seed=8)
check(two.choices[1].text == one.choices[0].text, f"n=2 choice 1 {two.choices[1].text!r} vs seed 8 {one.choices[0].text!r}")
batch = client.completions.create(model=model, prompt=[prompt, "Another prompt"], max_tokens=4, temperature=0)
check([ch.index for ch in batch.choices] == [0, 1] and batch.choices[0].text == single.choices[0].text,
      f"two prompts: {batch}")
stream_choices = {}
for ch in client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                         temperature=0, n=2, stream=True):
    for c in ch.choices:
        stream_choices[c.index] = stream_choices.get(c.index, "") + (c.delta.content or "")
check(sorted(stream_choices) == [0, 1] and stream_choices[0] == stream_choices[1], f"streamed n=2: {stream_choices}")

# echo with logprobs scores the prompt (lm-eval's loglikelihood requests): the prompt's tokens come
# first, the first with no logprob, each the model's; the text starts with the prompt.
scored = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0, echo=True, logprobs=1)
lp = scored.choices[0].logprobs
check(scored.choices[0].text.startswith(prompt), f"echo text {scored.choices[0].text!r}")
check(len(lp.token_logprobs) == scored.usage.prompt_tokens + 1 and lp.token_logprobs[0] is None
      and all(v <= 0 for v in lp.token_logprobs[1:]), f"echo logprobs {lp}")

# vLLM's prompt_logprobs (an extra field, read from the choice's extras): null for the first prompt
# token, then {id: {logprob, rank, decoded_token}} with the prompt token first, agreeing with echo's.
ranked = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0,
                                   extra_body={"prompt_logprobs": 2})
plp = ranked.choices[0].model_extra["prompt_logprobs"]
check(len(plp) == ranked.usage.prompt_tokens and plp[0] is None, f"prompt_logprobs {plp}")
for k, entry in enumerate(plp[1:], start=1):
    first = next(iter(entry.values()))
    check(2 <= len(entry) <= 3 and first["rank"] >= 1 and abs(first["logprob"] - lp.token_logprobs[k]) < 1e-6
          and all(isinstance(e["decoded_token"], str) for e in entry.values()), f"prompt_logprobs[{k}] {entry}")

# min_tokens (vLLM's, what genai-perf sends with max_tokens to fix the output length).
fixed = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0, extra_body={"min_tokens": 6})
check(fixed.usage.completion_tokens == 6, f"min_tokens = max_tokens = 6: {fixed.usage}")

# Seeded sampling repeats itself.
a = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0.9, top_p=0.9, seed=7)
b = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0.9, top_p=0.9, seed=7)
check(a.choices[0].text == b.choices[0].text, "seeded sampling differs")

# Chat, not streamed and streamed (the answer's content and reasoning fields are strings or None).
messages = [{"role": "user", "content": "Hello!"}]
chat = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0)
msg = chat.choices[0].message
check(msg.role == "assistant" and chat.usage.completion_tokens > 0, f"chat {chat}")
parts = list(client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0, stream=True))
content = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
check(content == (msg.content or ""), f"chat streamed {content!r} != {msg.content!r}")


def closers(text):
    """The brackets that close what `text` leaves open (brackets inside strings do not count)."""
    stack, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    return "".join(reversed(stack))


def starts_json_object(text):
    """Whether a short ending makes `text` one JSON object: an unfinished escape, number or literal,
    then maybe a closing quote, then maybe a value, then the open brackets closed."""
    if not text.strip():
        return True
    for fill in ("", "0", "00", "000", "0000", "n", "ue", "e", "rue", "alse", "lse", "se", "ull", "ll", "l"):
        for quote in ("", '"'):
            for value in ("", "0", ":0", '"k":0'):
                whole = text + fill + quote + value
                try:
                    if isinstance(json.loads(whole + closers(whole)), dict):
                        return True
                except ValueError:
                    pass
    return False


check(starts_json_object('{"a": [1, {"b\\u00') and starts_json_object('{"a": "[\\"') and not starts_json_object('{"a": }'),
      "starts_json_object")

# response_format json_object and json_schema: the answer is one JSON object, finish_reason "stop"
# when it closes, or the start of one when max_tokens cuts it; the random tiny model writes nothing
# like it unconstrained.
json_messages = [{"role": "user", "content": "Reply with a JSON object."}]
schema = {"type": "json_schema", "json_schema": {"name": "reply", "schema": {"type": "object"}}}
answers = []
for response_format in ({"type": "json_object"}, schema):
    for seed in range(3):
        r = client.chat.completions.create(model=model, messages=json_messages, max_tokens=24, temperature=1.0,
                                           seed=seed, response_format=response_format)
        content, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
        answers.append(content)
        if finish == "stop":
            check(isinstance(json.loads(content), dict), f"closed JSON answer {content!r}")
        else:
            check(finish == "length" and starts_json_object(content), f"JSON answer {finish} {content!r}")
check(any(a.strip() for a in answers), f"JSON answers all blank: {answers}")
# A json_schema is enforced: an object that closes has the one required key with an enum value.
enum_schema = {"type": "json_schema", "json_schema": {"name": "pick", "schema": {
    "type": "object", "properties": {"k": {"enum": ["v", "w"]}}, "required": ["k"], "additionalProperties": False}}}
closed = 0
for seed in range(6):
    r = client.chat.completions.create(model=model, messages=json_messages, max_tokens=24, temperature=1.0,
                                       seed=seed, response_format=enum_schema)
    content, finish = r.choices[0].message.content or "", r.choices[0].finish_reason
    if finish == "stop":
        closed += 1
        check(json.loads(content) in ({"k": "v"}, {"k": "w"}), f"schema answer {content!r}")
    else:
        check(finish == "length" and starts_json_object(content), f"schema answer {finish} {content!r}")
check(closed > 0, "no schema answer closed in 24 tokens")
# vLLM's guided_json on completions: the text is one object the schema accepts (or the start of one).
guided_closed = 0
for seed in range(6):
    r = client.completions.create(model=model, prompt="Answer in JSON:", max_tokens=24, temperature=1.0, seed=seed,
                                  extra_body={"guided_json": enum_schema["json_schema"]["schema"]})
    if r.choices[0].finish_reason == "stop":
        guided_closed += 1
        check(json.loads(r.choices[0].text) in ({"k": "v"}, {"k": "w"}), f"guided_json text {r.choices[0].text!r}")
    else:
        check(starts_json_object(r.choices[0].text), f"guided_json text {r.choices[0].text!r}")
check(guided_closed > 0, "no guided_json completion closed in 24 tokens")
# vLLM's guided_choice: chat and completions answer with one of the choices, streamed too.
labels = ["positive", "negative", "neutral"]
for seed in range(3):
    r = client.chat.completions.create(model=model, messages=json_messages, max_tokens=16, temperature=1.0, seed=seed,
                                       extra_body={"guided_choice": labels})
    check(r.choices[0].message.content in labels and r.choices[0].finish_reason == "stop",
          f"guided_choice answer {r.choices[0].message.content!r} ({r.choices[0].finish_reason})")
    r = client.completions.create(model=model, prompt="Sentiment:", max_tokens=16, temperature=1.0, seed=seed,
                                  extra_body={"structured_outputs": {"choice": labels}})
    check(r.choices[0].text in labels and r.choices[0].finish_reason == "stop",
          f"structured_outputs.choice text {r.choices[0].text!r} ({r.choices[0].finish_reason})")
streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
    model=model, messages=json_messages, max_tokens=16, stream=True, extra_body={"guided_choice": labels}) if c.choices)
check(streamed in labels, f"streamed guided_choice answer {streamed!r}")
# vLLM's guided_regex: the answer is a whole match (checked with Python's re), streamed too; a
# pattern with a construct the server refuses is a 400 naming it.
date = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])( \u00e9t\u00e9)?"
for seed in range(3):
    r = client.chat.completions.create(model=model, messages=json_messages, max_tokens=24, temperature=1.0, seed=seed,
                                       extra_body={"guided_regex": date})
    check(re.fullmatch(date, r.choices[0].message.content) and r.choices[0].finish_reason == "stop",
          f"guided_regex answer {r.choices[0].message.content!r} ({r.choices[0].finish_reason})")
    r = client.completions.create(model=model, prompt="Date:", max_tokens=24, temperature=1.0, seed=seed,
                                  extra_body={"structured_outputs": {"regex": date}})
    check(re.fullmatch(date, r.choices[0].text) and r.choices[0].finish_reason == "stop",
          f"structured_outputs.regex text {r.choices[0].text!r} ({r.choices[0].finish_reason})")
streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
    model=model, messages=json_messages, max_tokens=24, stream=True, extra_body={"guided_regex": date}) if c.choices)
check(re.fullmatch(date, streamed), f"streamed guided_regex answer {streamed!r}")
try:
    client.completions.create(model=model, prompt="x", max_tokens=4, extra_body={"guided_regex": "a(?=b)"})
    check(False, "a lookahead was accepted")
except openai.BadRequestError as e:
    check("lookahead" in str(e) and "guided_regex" in str(e), f"regex error {e}")
try:
    client.chat.completions.create(model=model, messages=json_messages, max_tokens=4, response_format={
        "type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "object", "properties": {"a": {"type": "int"}}}}})
    check(False, "a schema with an unknown type was accepted")
except openai.BadRequestError as e:
    check("/properties/a/type" in str(e), f"schema error {e}")
free = client.chat.completions.create(model=model, messages=json_messages, max_tokens=24, temperature=0)
check(not (free.choices[0].message.content or "").lstrip().startswith("{"), "the unconstrained answer starts an object")
greedy = dict(model=model, messages=json_messages, max_tokens=16, temperature=0, response_format={"type": "json_object"})
whole = client.chat.completions.create(**greedy).choices[0].message.content or ""
parts = list(client.chat.completions.create(**greedy, stream=True))
check("".join(p.choices[0].delta.content or "" for p in parts if p.choices) == whole, "JSON answer streamed differs")
check(starts_json_object(whole), f"greedy JSON answer {whole!r}")
try:
    client.chat.completions.create(model=model, messages=json_messages, max_tokens=4, response_format={"type": "json_object"},
                                   tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="required")
    check(False, "response_format with tool_choice required was accepted")
except openai.BadRequestError:
    pass

# Bad input: the errors the client maps, and the server stays up.
try:
    openai.OpenAI(base_url=base_url + "/v1", api_key="wrong", max_retries=0).models.list()
    check(False, "a wrong key was accepted")
except openai.AuthenticationError:
    pass
for kwargs, error, what in [
    ({"model": "nonesuch"}, openai.NotFoundError, "unknown model"),
    ({"model": model, "n": 65}, openai.BadRequestError, "n = 65 (most 64)"),
    ({"model": model, "prompt": "word " * 400}, openai.BadRequestError, "prompt over max-model-len"),
    ({"model": model, "temperature": -1}, openai.BadRequestError, "negative temperature"),
]:
    args = {"prompt": prompt, "max_tokens": 4, **kwargs}
    try:
        client.completions.create(**args)
        check(False, what + " was accepted")
    except error:
        pass
request = urllib.request.Request(base_url + "/v1/completions", data=b"{not json", method="POST",
                                 headers={"Authorization": "Bearer " + api_key, "Content-Type": "application/json"})
try:
    urllib.request.urlopen(request, timeout=30)
    check(False, "malformed JSON was accepted")
except urllib.error.HTTPError as e:
    body = json.loads(e.read())
    check(e.code == 400 and "message" in body["error"], f"malformed JSON: {e.code} {body}")
with urllib.request.urlopen(base_url + "/health", timeout=30) as r:
    check(r.status == 200, "health after the bad requests")
for method in ("GET", "POST"):
    with urllib.request.urlopen(urllib.request.Request(base_url + "/ping", method=method), timeout=30) as r:
        check(r.status == 200 and r.read() == b"", f"{method} /ping")
with urllib.request.urlopen(urllib.request.Request(base_url + "/version", headers={"Authorization": "Bearer " + api_key}),
                            timeout=30) as r:
    version = json.load(r)["version"]
    check(re.fullmatch(r"\d+\.\d+\.\d+", version) is not None, f"/version {version!r}")
print("ok")
