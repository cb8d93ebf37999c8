"""The assemble pipeline: layered context under a hard token budget, in snapshot / focused / streaming / auto modes.

acn/nodes/assemble.py is the node over it (NODE and a thin run), as acn/compaction/session.py is compact's; its
request and response models are in acn/assembly/models.py.
"""

from __future__ import annotations

import logging
import re

from acn.assembly.budget import FLOW_ORDER, MODE_DEFAULTS, PHASES, BudgetRatios, layer_shares
from acn.assembly.current import current_memories, current_segments, stale_values
from acn.assembly.earlier import from_earlier_conversation
from acn.assembly.fill import Fill, fill_memories
from acn.assembly.fit import Fitted, Item, fit_message_items, fit_text_items, layer_lines, surely_kept
from acn.assembly.layers import memory_items, note_items, segment_items, turn_items
from acn.assembly.models import LAYERS, AssembleRequest, AssembleResponse, Dropped, Mode, Source, Tokens
from acn.assembly.recall import focused_memories, relative_floor, turn_pool, unreadable_reason
from acn.assembly.standing import (
    FOCUSED_KINDS,
    STANDING_KINDS,
    STANDING_SHARE,
    as_messages,
    standing_memories,
    within_share,
)
from acn.assembly.tool_pairs import paired_tool_messages
from acn.common.conversation import SessionState
from acn.common.errors import ValidationError
from acn.common.metrics import UNREADABLE_ROW
from acn.common.models import (
    Memory,
    MemoryKind,
    Message,
)
from acn.retrieval.hybrid_rank import MemoryRetrieveRequest, rank, retrieval_query
from acn.services.deps import Deps
from acn.text.lang import detect_language
from acn.text.numbers import value_present
from acn.text.similarity import normalise

# Planning-type inputs (a plan, a summary, next steps) need the whole working state in view, not a slice of it.
_PLANNING = re.compile(r"计划|规划|方案|步骤|总结|回顾|进度|整体|全部|接下来|下一步|目标|清单|"
                       r"\b(plan|steps|summary|summari[sz]e|overall|progress|next steps?|status|recap|overview)\b",
                       re.IGNORECASE)
log = logging.getLogger("acn.assemble")


def assemble(request: AssembleRequest, deps: Deps) -> AssembleResponse:
    """Assemble the layers in order: identity, memory, working state, recent turns, user input."""
    tokenizer = deps.tokenizer
    language = request.language or detect_language(request.user_input or request.system_prompt)
    mode = resolve_mode(request.mode, request.user_input)
    state = session_state(request, deps)
    history = request.messages if request.messages is not None else state.buffer
    system_messages = fixed_system(request, history)
    user = [Message(role="user", content=request.user_input)] if request.user_input else []
    fixed = sum(tokenizer.count_message(m) for m in [*system_messages, *user])
    if fixed > request.max_tokens:
        raise ValidationError(f"system prompt and user input alone need {fixed} tokens; max_tokens is "
                              f"{request.max_tokens}", [f"max_tokens: at least {fixed} needed"])
    stale = stale_values(deps.memories, deps.tenant, request)
    budget = ratios(request, mode)
    history_share = layer_shares(request.max_tokens - fixed, budget)["history"]
    candidates, fill, withheld = layer_candidates(request, deps, state, history, mode, language, stale,
                                                  history_share)
    available = request.max_tokens - fixed
    fitted = without_repeats(fit_layers(candidates, available, budget, deps, memory_first=mode == "focused",
                                        fill=fill), candidates, available, deps, fill=fill)
    return build_response(request, mode, system_messages, user, fitted, withheld, deps)


def resolve_mode(mode: Mode, user_input: str) -> str:
    """Return the concrete mode: auto is snapshot for planning-type inputs, focused otherwise."""
    if mode != "auto":
        return mode
    return "snapshot" if _PLANNING.search(user_input) else "focused"


def ratios(request: AssembleRequest, mode: str) -> BudgetRatios:
    """Return the layer ratios: phase preset, explicit budget, or the mode's defaults."""
    if request.phase:
        return PHASES[request.phase]
    return request.budget or MODE_DEFAULTS.get(mode, BudgetRatios())


def session_state(request: AssembleRequest, deps: Deps) -> SessionState:
    """Return the session's latest state when the request does not bring its own history and summary."""
    if request.messages is not None and request.working_summary is not None:
        return SessionState()
    sessions = deps.sessions
    return sessions.head(deps.tenant, request)


def fixed_system(request: AssembleRequest, history: list[Message]) -> list[Message]:
    """Return the identity layer: the system prompt plus any system messages found in the history."""
    texts = [request.system_prompt] + [m.content for m in history if m.role == "system"]
    text = "\n\n".join(t for t in texts if t.strip())
    return [Message(role="system", content=text)] if text else []


def layer_candidates(request: AssembleRequest, deps: Deps, state: SessionState, history: list[Message],
                     mode: str, language: str, stale: set[str],
                     history_share: int) -> tuple[dict[str, list[Item]], Fill, list[Dropped]]:
    """Return each layer's candidate items in priority order, the memory layer's fill (made when asked for), and
    what is withheld as superseded.

    Archived messages of the turns the history layer surely shows (those that fit its own share) are not
    memory candidates; older turns of a long buffer are, since the history layer may not reach them.
    """
    working: list[Item]
    if request.working_summary is not None:
        text = request.working_summary.strip()
        working = [Item(key="working_summary", variants=[text], order=(0,),
                        source={"id": "working_summary", "kind": "summary", "layer": "working"})] if text else []
    else:
        working = segment_items(current_segments(state.segments, stale, language), request.user_input, language,
                                deps.tokenizer, brief_only=mode == "streaming")
    recent = turn_items(history)
    shown = {item.source["turn_range"][0] for item in surely_kept(recent, history_share, deps.tokenizer)
             if item.source}
    below: list[Memory] = []  # BM25 only: the matches under the score floor, part of the fill (fill_memories)
    found = [m for m in memory_candidates(request, deps, mode, history, shown, below)
             if not (m.kind == "turn" and m.turn_range and m.turn_range[0] in shown
                     and m.session_id == request.session_id)]  # an earlier conversation's turn 1 is not this one's
    found, unreadable = readable_candidates(found)
    served, stale_memories = current_memories(found, stale)
    memory = memory_items(served, language, deps.tokenizer) if request.memories is None else \
        note_items(request.memories, language, kind="memory")
    memory += note_items(request.knowledge or [], language, kind="knowledge")
    withheld = [Dropped(layer="memory", id=m.id, kind=m.kind, reason="states a value superseded later",
                        tokens=deps.tokenizer.count(m.content)) for m in stale_memories]

    def spare() -> list[Memory]:  # read only if a fit asks for the fill (acn/assembly/fill.py)
        if request.memories is not None or not fills_leftover(request, mode, deps):
            return []
        return fill_memories(request, deps, history, below, turn_pool(request.max_tokens))

    fill = Fill(spare, served, stale, shown, language, deps.tokenizer)
    return {"memory": memory, "working": working, "history": recent}, fill, unreadable + withheld


def fills_leftover(request: AssembleRequest, mode: str, deps: Deps) -> bool:
    """Whether the memory layer has a fill: a focused BM25-only search for a user input (see fill_memories)."""
    return (mode not in ("snapshot", "streaming") and bool(request.user_input.strip())
            and deps.memories.embedder is None)


def readable_candidates(found: list[Memory]) -> tuple[list[Memory], list[Dropped]]:
    """Split stored candidates into those the layer can show and those it cannot read (listed in `dropped`).

    A row whose reserved meta is not what the server wrote (see common.models.RESERVED_INT_META) is skipped,
    logged and counted, never a 500 for the whole session.
    """
    kept, unreadable = [], []
    for memory in found:
        why = unreadable_reason(memory)
        if why is None:
            kept.append(memory)
            continue
        log.warning("assemble skips stored row %s: %s", memory.id, why)
        unreadable.append(Dropped(layer="memory", id=memory.id, kind=memory.kind,
                                  reason=f"{UNREADABLE_ROW}: {why}", tokens=0))
    return kept, unreadable


def memory_candidates(request: AssembleRequest, deps: Deps, mode: str, history: list[Message],
                      shown: set[int], spare: list[Memory] | None = None) -> list[Memory]:
    """Return stored memories for the layer: standing state (snapshot), or retrieval for the input (focused);
    `spare` receives, BM25 only, the candidates under the score floor (the start of the fill: fill_memories); with
    dense vectors they come last in the list instead."""
    if request.memories is not None or mode == "streaming":
        return []
    found: list[Memory] = []
    if mode == "snapshot":
        found += standing_memories(request, deps)
        if request.user_input.strip() and request.top_k:
            found += retrieve(request, deps, kinds=None, top_k=request.top_k)
    elif request.user_input.strip():
        # Who the user is and what is in force, within its share, whatever the question matches (focused too).
        standing = as_messages(standing_memories(request, deps, FOCUSED_KINDS), request, deps)
        found += within_share(standing, int(request.max_tokens * STANDING_SHARE), deps.tokenizer)
        pool = turn_pool(request.max_tokens) if request.archive_top_k is None else request.archive_top_k
        lexical = fills_leftover(request, mode, deps)  # here: no embedder (one condition with the fill's)
        below: list[Memory] | None = [] if spare is not None else None
        found += focused_memories(request, request.user_input, deps, top_k=request.top_k, turn_pool=pool,
                                  history=history, shown_turns=shown, floor=relative_floor(request.max_tokens),
                                  spill=below)
        if below is not None and spare is not None:
            if lexical:
                spare += below
            else:
                # With dense vectors the candidates under the floor follow the served ones in the memory layer
                # (no store call more): they take what the hits leave before the recent turns take it. As a fill
                # after every layer they came too late (the history had taken the rest). Issue 28, dev splits of
                # bench.recall at 1k: en-chain 84.6 -> 93.3, zh-daily 96.1 -> 96.6 (docs/ranker.md).
                found += below
    return list({m.id: m for m in found}.values())


def retrieve(request: AssembleRequest, deps: Deps, *, kinds: list[MemoryKind] | None, top_k: int) -> list[Memory]:
    """Return memories ranked for the user input (scored exactly as memory_retrieve does)."""
    query = MemoryRetrieveRequest(agent_id=request.agent_id, session_id=request.session_id,
                                  user_id=request.user_id, query=retrieval_query(request.user_input), kinds=kinds,
                                  top_k=top_k)
    return [r.memory for r in rank(query, deps)[:top_k]]


def fit_layers(candidates: dict[str, list[Item]], available: int, budget: BudgetRatios,
               deps: Deps, *, memory_first: bool = False, fill: Fill | None = None) -> dict[str, Fitted]:
    """Fit each layer into its share; unused budget flows to the layers that want more, by their ratios.

    `memory_first` (focused mode): the memory layer takes what the others leave before they share it, since a
    focused context answers from what retrieval found and the recent turns keep their own share. Issue 28, dev
    splits of bench.recall with the short day headers: MADial zh 1k 75.8 -> 76.2, nothing else moved.
    """
    shares = layer_shares(available, budget)
    fitted = {layer: fit(layer, candidates[layer], shares[layer], deps) for layer in FLOW_ORDER}
    spare = available - sum(f.tokens for f in fitted.values())
    if memory_first and spare > 0 and fitted["memory"].dropped:
        fitted["memory"] = fit("memory", candidates["memory"], fitted["memory"].tokens + spare, deps)
        spare = available - sum(f.tokens for f in fitted.values())
    wanting = [layer for layer in FLOW_ORDER if fitted[layer].dropped]
    if spare > 0 and wanting:
        extra = layer_shares(spare, budget)
        weights = {layer: extra[layer] for layer in wanting}
        total = sum(weights.values()) or 1
        for layer in wanting:
            fitted[layer] = fit(layer, candidates[layer], fitted[layer].tokens + spare * weights[layer] // total, deps)
    for layer in FLOW_ORDER:  # whatever is still left (rounding, items that did not fit) goes in order
        spare = available - sum(f.tokens for f in fitted.values())
        if spare > 0 and fitted[layer].dropped:
            fitted[layer] = fit(layer, candidates[layer], fitted[layer].tokens + spare, deps)
    spare = available - sum(f.tokens for f in fitted.values())
    if spare > 0 and fill is not None and fill.has_lines:  # BM25 only: the rest of the budget (acn/assembly/fill.py)
        memory = fitted["memory"]
        refit = fill.fitted(candidates["memory"], memory.tokens + spare,
                            lambda items, room: fit("memory", items, room, deps))
        kept = {item.key for item in refit.items}  # a fill item that did not fit was never asked for: not dropped
        fitted["memory"] = Fitted(refit.items, [(i, t) for i, t in memory.dropped if i.key not in kept], refit.tokens)
    return fitted


def without_repeats(fitted: dict[str, Fitted], candidates: dict[str, list[Item]], available: int,
                    deps: Deps, *, fill: Fill | None = None) -> dict[str, Fitted]:
    """Drop from the memory layer what the history layer ended up showing (an archived message of a shown turn,
    a memory whose text a shown message holds, e.g. the fact extracted from the last message), and give the room
    it took to the next memory candidates (it used to stay empty)."""
    history = fitted["history"].items
    in_history = {item.source["turn_range"][0] for item in history if item.source}
    said = [normalise(m.content) for item in history for m in item.messages if m.content]

    def repeated(item: Item) -> bool:
        if item.source and item.source.get("kind") == "turn" and item.source.get("turn_range") \
                and item.source["turn_range"][0] in in_history and not from_earlier_conversation(item.source):
            return True
        if item.source and item.source.get("kind") in STANDING_KINDS:
            # Who the user is and the rules in force stay, shown or not: the memory layer is what a builder puts in
            # the system prompt (Dify's read_context: memory_text), which would otherwise change as turns scroll.
            return False
        text = normalise(item.text) if item.text else ""
        return bool(text) and any(text in message for message in said)

    memory = fitted["memory"]
    if not any(repeated(item) for item in memory.items):
        return fitted
    spare = available - sum(f.tokens for f in fitted.values())
    pool = [item for item in candidates["memory"] if not repeated(item)]
    room = memory.tokens + spare
    refit = fit("memory", pool, room, deps) if fill is None else \
        fill.fitted(pool, room, lambda items, budget: fit("memory", items, budget, deps),
                    keep=lambda item: not repeated(item))
    kept = {item.key for item in refit.items}
    # As in fit_layers: a fill item that did not fit was never asked for (not dropped), nor is a repeat.
    wanted = {item.key for item in candidates["memory"] if not repeated(item)}
    dropped = [(i, t) for i, t in refit.dropped if i.key in wanted and i.key not in kept]
    return {**fitted, "memory": Fitted(refit.items, dropped, refit.tokens)}


def fit(layer: str, items: list[Item], budget: int, deps: Deps) -> Fitted:
    """Fit one layer: history by whole turns, the others line by line."""
    if layer == "history":
        return fit_message_items(items, budget, deps.tokenizer)
    return fit_text_items(items, budget, deps.tokenizer)


def build_response(request: AssembleRequest, mode: str, system_messages: list[Message], user: list[Message],
                   fitted: dict[str, Fitted], withheld: list[Dropped], deps: Deps) -> AssembleResponse:
    """Render the layers into messages and strings, and count what each costs."""
    memory_text = "\n".join(layer_lines(fitted["memory"].items))
    working_lines = [item.chosen for item in fitted["working"].items]
    working_text = "\n".join(working_lines)
    history, repaired = paired_tool_messages([m for item in fitted["history"].items for m in item.messages], deps)
    layer_messages = {
        "system": system_messages,
        "memory": [Message(role="system", content=memory_text)] if memory_text else [],
        "working": [Message(role="system", content=working_text)] if working_text else [],
        "history": history,
        "user_input": user,
    }
    messages = [m for layer in LAYERS for m in layer_messages[layer]]
    by_layer = {layer: sum(deps.tokenizer.count_message(m) for m in layer_messages[layer]) for layer in LAYERS}
    system_text = "\n\n".join(t for t in (system_messages[0].content if system_messages else "", memory_text,
                                          working_text) if t)
    history_text = "\n".join(f"{m.role}: {m.content}" for m in history if m.content)
    prompt = "\n\n".join(t for t in (system_text, history_text, f"user: {request.user_input}"
                                     if request.user_input else "") if t)
    return AssembleResponse(
        mode=mode, messages=[strip_meta(m) for m in messages], system_text=system_text, memory_text=memory_text,
        working_text=working_text, history_text=history_text, prompt=prompt,
        tokens=Tokens(total=sum(by_layer.values()), budget=request.max_tokens, by_layer=by_layer),
        dropped=withheld + dropped_list(fitted) + repaired, sources=sources_list(fitted),
        probes={fact: value_present(fact, prompt) for fact in request.probes},
    )


def strip_meta(message: Message) -> Message:
    """Return the message as an LLM takes it (provenance lives in `sources`)."""
    return message.model_copy(update={"meta": {}})


def dropped_list(fitted: dict[str, Fitted]) -> list[Dropped]:
    """Return every candidate that did not fit, with the reason."""
    return [Dropped(layer=layer, id=item.key, kind=(item.source or {}).get("kind", layer),
                    reason="over the layer's token budget", tokens=tokens)
            for layer, result in fitted.items() for item, tokens in result.dropped]


def sources_list(fitted: dict[str, Fitted]) -> list[Source]:
    """Return the provenance of everything that made it in."""
    return [Source(**item.source) for layer in ("memory", "working", "history")
            for item in fitted[layer].items if item.source]
