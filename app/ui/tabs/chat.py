"""The Chat tab: talk to a run's adapter and its base side by side, streamed, with Stop (app.ui.chat_view)."""

from app.data.images import IMAGE_SUFFIXES
from app.errors import UserError
from app.ui import chat_view as cv
from app.ui.widgets import Context, err


def build(ctx: Context, tab) -> None:
    import gradio as gr

    runs_dir, jobs = ctx.runs_dir, ctx.jobs
    holder = cv.ChatHolder()
    with gr.Row():
        run = gr.Dropdown([], label="Run (with an adapter)", elem_id="chat-run", scale=3)
        who = gr.Radio(list(cv.WHO), value="adapter and base", label="Who answers", elem_id="chat-who", scale=2)
        temp = gr.Slider(0.0, 1.5, value=0.0, step=0.05, label="Temperature (0 = greedy, as Compare)",
                         elem_id="chat-temp", scale=2)
        tokens = gr.Number(128, label="Max new tokens", precision=0, elem_id="chat-tokens", scale=1)
    with gr.Row():
        system = gr.Textbox(label="System prompt (the run's; editing it starts a new conversation)", lines=1,
                            elem_id="chat-system", scale=4)
        # a File, not an Image: Gradio would decode the picture itself, and a broken one failed inside Gradio (a
        # toast, every box "Error"); here it is read as chat reads it, and a broken one is one line
        image = gr.File(label="Picture (a run trained on pictures)", file_types=list(IMAGE_SUFFIXES),
                        type="filepath", elem_id="chat-image", height=120, scale=1)
    with gr.Row():
        adapter_box = gr.Chatbot([], label="adapter", elem_id="chat-adapter", height=360)
        base_box = gr.Chatbot([], label="base (adapter off)", elem_id="chat-base", height=360)
    # one line that grows: Enter sends, Shift+Enter starts a new line (Gradio's rule for lines=1, max_lines > 1)
    message = gr.Textbox(label="Message", lines=1, max_lines=6, elem_id="chat-msg",
                         placeholder="Enter sends · Shift+Enter: a new line")
    with gr.Row():
        send = gr.Button("Send", variant="primary", elem_id="chat-send")
        stop = gr.Button("Stop", elem_id="chat-stop")
        clear = gr.Button("New conversation", elem_id="chat-clear")
    note = gr.Markdown(elem_id="chat-note")

    def on_tab(current):
        choices = cv.chat_choices(runs_dir)
        return gr.update(choices=choices, value=current if current in choices else (choices[0] if choices else None))

    tab.select(on_tab, run, run)

    def on_run(name):
        holder.reset()
        return cv.run_system_prompt(runs_dir, name), [], [], ""

    run.change(on_run, run, [system, adapter_box, base_box, note])

    def on_send(name, sys_text, text, who_value, t, n, a_hist, b_hist, picture=None):
        hists = {"adapter": list(a_hist or []), "base": list(b_hist or [])}
        if not (text or "").strip():
            yield hists["adapter"], hists["base"], text, err(UserError("type a message to send"))
            return
        sides = cv.WHO[who_value]
        for s in sides:
            hists[s] += [{"role": "user", "content": text}, {"role": "assistant", "content": ""}]
        yield hists["adapter"], hists["base"], "", "generating…"
        try:
            for shown in cv.stream(holder, jobs, runs_dir, name, sys_text, text, who_value, t, n, ctx.local_only,
                                   picture):
                for s, reply in shown.items():
                    hists[s][-1] = {"role": "assistant", "content": reply}
                yield hists["adapter"], hists["base"], "", ""
            for s in sides:  # a reply with no text is said so, not shown as a blank bubble
                if not hists[s][-1]["content"].strip():
                    hists[s][-1] = {"role": "assistant", "content": cv.EMPTY_REPLY}
            yield hists["adapter"], hists["base"], "", ""
        except Exception as e:  # noqa: BLE001
            for s in sides:  # the unanswered message leaves the view, as it left the conversation
                if hists[s] and hists[s][-1]["content"] == "":
                    hists[s] = hists[s][:-2]
            yield hists["adapter"], hists["base"], text, err(e)

    inputs = [run, system, message, who, temp, tokens, adapter_box, base_box, image]
    outputs = [adapter_box, base_box, message, note]
    send.click(on_send, inputs, outputs)
    message.submit(on_send, inputs, outputs)
    stop.click(lambda: holder.stop.set(), None, None)

    def on_clear():
        holder.reset()
        return [], [], ""

    clear.click(on_clear, None, [adapter_box, base_box, note])
