"""A product as it is, pointed at `workbench gateway`: the OpenAI SDK asks "what number comes next?" about the
numbers 0..N-1 (`python product.py N`, 16 by default), one session a question, and sends its own judgement of each
answer (right or wrong) as feedback. It prints how many answers each arm served, as JSON.

GATEWAY is the gateway's root URL (http://127.0.0.1:8400), WORKBENCH_GATEWAY_KEY the app's gateway key."""

import json
import os
import re
import sys
import urllib.request

import openai

GATEWAY = os.environ["GATEWAY"]
KEY = os.environ["WORKBENCH_GATEWAY_KEY"]
client = openai.OpenAI(base_url=f"{GATEWAY}/v1", api_key=KEY, max_retries=0)
served: dict[str, int] = {}
for n in range(int(sys.argv[1]) if len(sys.argv) > 1 else 16):
    raw = client.chat.completions.with_raw_response.create(
        model="support", max_tokens=12,
        messages=[{"role": "system", "content": "Answer with a number."},
                  {"role": "user", "content": f"What number comes next?\n{n}"}],
        extra_headers={"X-Workbench-Session": f"ticket-{n}"})
    answer = raw.parse().choices[0].message.content or ""
    arm = raw.headers["X-Workbench-Arm"]
    served[arm] = served.get(arm, 0) + 1
    right = re.findall(r"-?\d+", answer)[-1:] == [str(n + 1)]  # the product's own judgement
    body = json.dumps({"response_id": raw.headers["X-Workbench-Response-Id"], "score": 1.0 if right else 0.0})
    request = urllib.request.Request(f"{GATEWAY}/v1/feedback", data=body.encode(), method="POST",
                                     headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).read()
print(json.dumps(served))
