"""A model as the reward: the rubric it reads, the model that answers (an OpenAI-compatible endpoint, or a local model
qlora-app loads in 4-bit), and the score read from its answer, 0..1.

    rubric.py    the default rubric, a user's rubric file, reading a score out of a reply
    endpoint.py  an OpenAI-compatible endpoint through the official openai client: timeouts, retries, structured
                 replies where the server takes them; whether a URL is this machine (--local-only)
    local.py     a local judge model: the probability of each score, batched (no free text to read)
    reward.py    the ``judge`` component: TRL's reward-function interface, the cache, the counts

Owns: judging completions; the one part of app/rewards that loads a model (a local judge, on first use, through
app/model). Must not train, plan or record a run (the plan checks the endpoint under --local-only and counts a local
judge's memory; the run's callback logs the counts). Nothing heavy at module level (openai, torch load on first use).
"""
