"""A soak of `dsv4 serve`: 500 streamed requests from 32 clients at once, every tenth client
hanging up after its first chunk; half the prompts begin with the same long preamble, so the
prefix cache (on by default) serves them from shared blocks. Afterwards no
request is left running or waiting, the cache blocks are all free again, the prefix cache has hit,
the server answers, and every request that ran to its end gave the greedy text the same prompt
gives alone. Usage: soak_e2e.py BASE_URL API_KEY MODEL_NAME."""
import concurrent.futures
import http.client
import json
import re
import sys
import time
import urllib.parse
import urllib.request

import openai

base_url, api_key, model = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=300)
REQUESTS, CLIENTS, PROMPTS, MAX_TOKENS = 500, 32, 10, 4


def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


# Over 128 tokens: a request on it resumes on the state another left after its first 128.
PREAMBLE = "You are a careful assistant who answers in one short sentence. " * 14


def prompt(i):
    return (PREAMBLE if i % 2 == 0 else "") + f"Soak prompt number {i % PROMPTS}:"


# Requests sent again because the connection they went out on was reset before any answer (seen
# once in CI under load, one of 450: most likely a kept-alive connection whose 5 s keep-alive ran
# out as the client reused it, the race every keep-alive server has and clients meet by retrying;
# the openai client's own retries stay off so that nothing else is retried). Bounded below, so a
# server that drops connections still fails.
resent = []


def streamed(i):
    """The whole streamed answer of request i, with its finish reason."""
    for attempt in range(2):
        text, finish, answered = "", None, False
        try:
            for chunk in client.completions.create(model=model, prompt=prompt(i), max_tokens=MAX_TOKENS,
                                                   temperature=0, stream=True, extra_body={"ignore_eos": True}):
                answered = True
                if chunk.choices:
                    text += chunk.choices[0].text
                    finish = chunk.choices[0].finish_reason or finish
            return i, text, finish
        except openai.APIConnectionError:
            if answered or attempt == 1:
                raise
            resent.append(i)


def hang_up(i):
    """Request i streamed over a raw connection that is closed after the first chunk arrives."""
    url = urllib.parse.urlparse(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
    body = json.dumps({"model": model, "prompt": prompt(i), "max_tokens": 64, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    conn.request("POST", "/v1/completions", body=body,
                 headers={"Authorization": "Bearer " + api_key, "Content-Type": "application/json"})
    response = conn.getresponse()
    check(response.status == 200, f"request {i}: status {response.status}")
    check(response.readline().startswith(b"data:"), f"request {i}: no first chunk")
    conn.close()
    return i, None, "hung up"


def metrics():
    request = urllib.request.Request(base_url + "/metrics", headers={"Authorization": "Bearer " + api_key})
    with urllib.request.urlopen(request, timeout=30) as r:
        text = r.read().decode()
    values = {}
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prefix_cache_hits_total"):
        m = re.search(r"^dsv4:" + name + r"(?:\{[^}]*\})? ([0-9.eE+-]+)$", text, re.M)
        check(m is not None, f"/metrics has no dsv4:{name}")
        values[name] = float(m.group(1))
    return values


# Alone first: each prompt's greedy text.
alone = {}
for p in range(PROMPTS):
    alone[p] = "".join(streamed(p)[1:2])

start = time.time()
with concurrent.futures.ThreadPoolExecutor(max_workers=CLIENTS) as pool:
    results = list(pool.map(lambda i: hang_up(i) if i % 10 == 3 else streamed(i), range(REQUESTS)))
seconds = time.time() - start

check(len(resent) <= 5, f"{len(resent)} requests met a closed connection before any answer: {resent}")
finished = [r for r in results if r[2] != "hung up"]
check(len(finished) == REQUESTS - REQUESTS // 10, f"{len(finished)} requests finished")
for i, text, finish in finished:
    check(finish == "length", f"request {i}: finish_reason {finish}")
    check(text == alone[i % PROMPTS], f"request {i}: {text!r} in the busy server, {alone[i % PROMPTS]!r} alone")

deadline = time.time() + 60  # cancelled requests leave the engine at its next step
while True:
    m = metrics()
    if m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0 and m["kv_cache_usage_perc"] == 0:
        break
    check(time.time() < deadline, f"requests or cache blocks left behind: {m}")
    time.sleep(0.2)
check(m["prefix_cache_hits_total"] > 0, f"the shared preamble never hit the prefix cache: {m}")
with urllib.request.urlopen(base_url + "/health", timeout=30) as r:
    check(r.status == 200, "health after the soak")
print(f"ok: {REQUESTS} requests from {CLIENTS} clients ({REQUESTS // 10} hung up, {len(resent)} sent again) "
      f"in {seconds:.1f} s")
