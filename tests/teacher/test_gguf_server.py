"""A GGUF teacher in llama.cpp's child process: its scores are the model's (an f16 file against transformers' own
forward), its greedy answers too; a child killed by a signal, a file llama.cpp cannot load, a training process
killed with -9: each ends in one line or takes the child with it, never the caller."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from app.errors import UserError
from app.teacher.client import TeacherClient, TeacherFailed
from app.teacher.gguf_server import GgufSettings, GgufTeacher, TeacherDied

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hf_teacher():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from app.config.builtin import TEACHER_MODEL
    from app.demo.recipe import base_model_path

    path = base_model_path(name=TEACHER_MODEL)
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def _prompt(tok, question: str) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                   add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def test_the_gguf_teacher_scores_and_answers_as_the_model_does(teacher_ggufs, hf_teacher):
    import torch

    model, tok = hf_teacher
    prompts = [_prompt(tok, q) for q in ("Tom has 12 apples and eats 5. How many are left?",
                                          "What is 7 times 6?", "A box holds 9 pens. How many in 4 boxes?")]
    with GgufTeacher(teacher_ggufs["f16"], GgufSettings(threads=1, context=256)) as child:
        client = TeacherClient(child.url, tok, died=child.died)
        assert client.tokenize([tok.decode(p) for p in prompts]) == prompts
        answers = client.answer(prompts, 40, 5, tok.eos_token_id)
    for p, a in zip(prompts, answers):
        assert a.finish == "stop" and a.ids[-1] == tok.eos_token_id  # closed as training learns to stop
        with torch.no_grad():
            greedy = model.generate(torch.tensor([p]), max_new_tokens=40, do_sample=False)[0, len(p):].tolist()
            logps = model(torch.tensor([p + a.ids])).logits[0].log_softmax(-1)
        assert a.ids == greedy[:len(a.ids)]
        own = [logps[len(p) - 1 + j, t].item() for j, t in enumerate(a.ids)]
        assert a.lps == pytest.approx(own, abs=0.03)
        for j, (ids, lps) in enumerate(zip(a.top_ids, a.top_lps)):
            assert lps == sorted(lps, reverse=True) and len(ids) >= 5
            best = torch.topk(logps[len(p) - 1 + j], 5)
            assert lps[:5] == pytest.approx(best.values.tolist(), abs=0.03)


@pytest.mark.parametrize("sig,said", [(signal.SIGILL, "illegal instruction"), (signal.SIGKILL, "for memory")])
def test_a_child_killed_by_a_signal_is_one_line_naming_it(teacher_ggufs, hf_teacher, sig, said):
    _, tok = hf_teacher
    with GgufTeacher(teacher_ggufs["q4_k_m"], GgufSettings(threads=1, context=128)) as child:
        client = TeacherClient(child.url, tok, died=child.died, retries=0, label="t.gguf")
        os.kill(child.proc.pid, sig)
        child.proc.wait(timeout=10)
        with pytest.raises(TeacherFailed) as e:
            client.score([[1, 4, 5, 6]], [1], 3)
    line = str(e.value)
    assert "\n" not in line and signal.Signals(sig).name in line and said in line and "t.gguf" in line
    assert e.value.exit_code == 1


def test_a_file_llama_cpp_cannot_load_is_one_line(teacher_ggufs, tmp_path):
    from app.teacher.place import gguf_facts

    torn = tmp_path / "torn.gguf"
    data = teacher_ggufs["q4_k_m"].read_bytes()
    torn.write_bytes(data[: len(data) // 2])  # the header is whole, half the tensors are not
    with pytest.raises(TeacherDied) as e:
        GgufTeacher(torn, GgufSettings(threads=1, context=64)).start(timeout=120)
    assert "\n" not in str(e.value) and "torn.gguf" in str(e.value) and "llama.cpp" in str(e.value)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(UserError, match="not a readable GGUF"):
        gguf_facts(str(junk))


def test_the_child_ends_with_the_training_process(teacher_ggufs, tmp_path):
    """kill -9 of the process that started the teacher takes the teacher with it (no llama.cpp left holding RAM)."""
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from app.teacher.gguf_server import GgufSettings, GgufTeacher
        t = GgufTeacher({str(teacher_ggufs["q4_k_m"])!r}, GgufSettings(threads=1, context=64)).start()
        print(t.proc.pid, flush=True)
        time.sleep(120)
    """))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": root})
    child = int(parent.stdout.readline())
    os.kill(child, 0)  # running
    parent.kill()
    parent.wait(timeout=10)
    end = time.time() + 15
    while time.time() < end:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        try:  # a zombie of init's is gone for our purpose
            if open(f"/proc/{child}/stat").read().split()[2] == "Z":
                return
        except OSError:
            return
        time.sleep(0.2)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the teacher's llama.cpp child outlived the process that started it")
