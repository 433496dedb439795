"""One call of an official LLM SDK, printed as one JSON line, so that a test can compare
what the SDK gets from an upstream directly and through patchbay's proxy.

usage: sdk_call.py openai|anthropic BASE_URL MODEL stream|once [TIMEOUT_S] [PROMPT]

Prints {"text", "tool_calls", "usage", "finish"} (per choice for OpenAI), or
{"error": {...}} when the SDK raised: an HTTP error's status and body, or the exception
class for transport errors and timeouts.
"""

import json
import sys


def openai_call(base_url, model, stream, timeout, prompt):
    import openai

    client = openai.OpenAI(
        base_url=base_url.rstrip("/") + "/v1",
        api_key="sk-patchbay-test-key",
        max_retries=0,
        timeout=timeout,
    )
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = [{"role": "user", "content": prompt}]
    try:
        if stream:
            choices = {}
            usage = None
            for chunk in client.chat.completions.create(
                model=model,
                messages=messages,
                tools=tools,
                stream=True,
                stream_options={"include_usage": True},
            ):
                if chunk.usage is not None:
                    usage = chunk.usage.model_dump(exclude_none=True)
                for choice in chunk.choices:
                    c = choices.setdefault(
                        choice.index, {"text": "", "tool_calls": {}, "finish": None}
                    )
                    delta = choice.delta
                    if delta.content:
                        c["text"] += delta.content
                    for call in delta.tool_calls or []:
                        t = c["tool_calls"].setdefault(
                            call.index, {"id": None, "name": "", "arguments": ""}
                        )
                        if call.id:
                            t["id"] = call.id
                        if call.function and call.function.name:
                            t["name"] += call.function.name
                        if call.function and call.function.arguments:
                            t["arguments"] += call.function.arguments
                    if choice.finish_reason:
                        c["finish"] = choice.finish_reason
            out_choices = []
            for index in sorted(choices):
                c = choices[index]
                c["tool_calls"] = [c["tool_calls"][i] for i in sorted(c["tool_calls"])]
                out_choices.append(c)
            return {"choices": out_choices, "usage": usage}
        response = client.chat.completions.create(model=model, messages=messages, tools=tools)
        out_choices = []
        for choice in response.choices:
            calls = [
                {"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
                for t in (choice.message.tool_calls or [])
            ]
            out_choices.append(
                {
                    "text": choice.message.content or "",
                    "tool_calls": calls,
                    "finish": choice.finish_reason,
                }
            )
        usage = response.usage.model_dump(exclude_none=True) if response.usage else None
        return {"choices": out_choices, "usage": usage}
    except openai.APIStatusError as e:
        return {"error": {"status": e.status_code, "body": e.body}}
    except openai.APIError as e:
        return {"error": {"kind": type(e).__name__}}
    except Exception as e:  # a transport error mid-stream is not wrapped by the SDK
        return {"error": {"kind": type(e).__name__}}


def anthropic_call(base_url, model, stream, timeout, prompt):
    import anthropic

    client = anthropic.Anthropic(
        base_url=base_url, api_key="sk-ant-patchbay-test-key", max_retries=0, timeout=timeout
    )
    tools = [
        {
            "name": "get_weather",
            "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}},
        }
    ]
    messages = [{"role": "user", "content": prompt}]
    try:
        if stream:
            blocks = {}
            usage = {}
            stop = None
            for event in client.messages.create(
                model=model, max_tokens=256, messages=messages, tools=tools, stream=True
            ):
                if event.type == "message_start":
                    usage["input_tokens"] = event.message.usage.input_tokens
                elif event.type == "content_block_start":
                    block = event.content_block
                    blocks[event.index] = {
                        "type": block.type,
                        "text": getattr(block, "text", "") or "",
                        "name": getattr(block, "name", None),
                        "id": getattr(block, "id", None),
                        "json": "",
                    }
                elif event.type == "content_block_delta":
                    b = blocks.setdefault(
                        event.index, {"type": "?", "text": "", "name": None, "id": None, "json": ""}
                    )
                    if event.delta.type == "text_delta":
                        b["text"] += event.delta.text
                    elif event.delta.type == "input_json_delta":
                        b["json"] += event.delta.partial_json
                elif event.type == "message_delta":
                    usage["output_tokens"] = event.usage.output_tokens
                    stop = event.delta.stop_reason
            text = "".join(b["text"] for _, b in sorted(blocks.items()) if b["type"] == "text")
            calls = [
                {"id": b["id"], "name": b["name"], "input": json.loads(b["json"] or "{}")}
                for _, b in sorted(blocks.items())
                if b["type"] == "tool_use"
            ]
            return {"text": text, "tool_calls": calls, "usage": usage, "finish": stop}
        message = client.messages.create(
            model=model, max_tokens=256, messages=messages, tools=tools
        )
        text = "".join(b.text for b in message.content if b.type == "text")
        calls = [
            {"id": b.id, "name": b.name, "input": b.input}
            for b in message.content
            if b.type == "tool_use"
        ]
        usage = {
            "input_tokens": message.usage.input_tokens,
            "output_tokens": message.usage.output_tokens,
        }
        return {"text": text, "tool_calls": calls, "usage": usage, "finish": message.stop_reason}
    except anthropic.APIStatusError as e:
        return {"error": {"status": e.status_code, "body": e.body}}
    except anthropic.APIError as e:
        return {"error": {"kind": type(e).__name__}}
    except Exception as e:  # a transport error mid-stream is not wrapped by the SDK
        return {"error": {"kind": type(e).__name__}}


def main():
    api, base_url, model, mode = sys.argv[1:5]
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
    prompt = sys.argv[6] if len(sys.argv) > 6 else "What is the weather in Paris?"
    call = openai_call if api == "openai" else anthropic_call
    result = call(base_url, model, mode == "stream", timeout, prompt)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
