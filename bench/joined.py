"""Chained and rambling questions over one user's messages, generated from a seed, in Chinese and in English.

One conversation: 150–230 short messages (English: 300–420) a user sends an assistant. Among the chatter sit facts about people
(named by their relation: "my colleague", "表哥"), events ("the food festival", "读书会") and items ("the
camera", "投影仪"), each entity with two or three attributes stated in different messages that share only the
entity's name ("表哥上个月搬去成都了" … "表哥最近转行当律师助理了"). Every attribute value is unique in its
conversation, so a value names its entity. Two suites ask of it:

- chain:  an entity named by one attribute, asked about another ("搬去成都的那位，现在做什么工作？"); the evidence
          is both messages (the one that names it, the one that answers). Category `chain`, or `chain+1` when a
          second, direct question follows in the same input ("另外，…？"): its message is evidence too.
- ramble: chit-chat (the weather, a coffee), sometimes a first question about something else, a self-correction
          ("说错了，其实我想问…", "wait, what I mean is …"), then the question that counts; `ramble` (one
          correction), `ramble2` (two), `ramble+1` (two questions after the correction). Evidence: the messages the
          questions after the last correction need, never the abandoned one's.

Answers are stated in the messages, never in the questions. `generate(seed, language)` is pure; dev uses even
seeds and test odd ones (`seeds(split, n)`), like bench/zh_daily.py.
"""
# ruff: noqa: E501 (the templates read better one sentence per line)

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta

from bench import zh_daily
from bench.locomo import Question

SHAPES = ("chain", "ramble")
LANGUAGES = ("zh", "en")
CATEGORIES = {"chain": ("chain", "chain+1"), "ramble": ("ramble", "ramble2", "ramble+1")}
BASE_SEED = 28_000
QUESTIONS = 8


@dataclass(frozen=True)
class Attribute:
    """One thing that can be said about an entity: values, how a message says it, how a question names the
    entity by it, and how a question asks for it."""

    key: str
    values: list[str]
    say: list[str]  # {e} the entity's mention, {v} the value
    named: list[str]  # the entity named by this value alone: {v}
    ask: list[str]  # asks for this attribute of an entity named {d} (a description or the mention)


@dataclass(frozen=True)
class Kind:
    mentions: list[str]  # how messages name an entity of this kind
    attributes: list[Attribute]


@dataclass(frozen=True)
class Message:
    id: str
    text: str
    date: str


@dataclass
class Conversation:
    seed: int
    language: str
    shape: str
    messages: list[Message] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.language}-{self.shape}-{self.seed}"

    @property
    def split(self) -> str:
        return "dev" if self.seed % 2 == 0 else "test"


def seeds(split: str, count: int) -> list[int]:
    """Return `count` seeds of a split: even for dev, odd for test."""
    first = BASE_SEED + (0 if split == "dev" else 1)
    return [first + 2 * i for i in range(count)]


# --- Chinese -------------------------------------------------------------------------------------------------

ZH_PEOPLE = Kind(
    ["表哥", "表姐", "同事", "大学室友", "邻居", "发小", "组长", "房东", "舅舅", "堂妹", "闺蜜", "高中同学", "前同事", "小姨"],
    [Attribute("city", zh_daily.CITIES, ["{e}上个月搬去{v}了", "{e}说已经在{v}安顿下来了", "听说{e}去{v}定居了"],
               ["搬去{v}的那位", "去了{v}的那个人", "在{v}安家的那个朋友"], ["{d}现在住在哪个城市？", "{d}搬到哪去了？"]),
     Attribute("job", zh_daily.JOBS, ["{e}最近转行当{v}了", "{e}找了份{v}的活儿", "{e}现在干{v}，说还挺累"],
               ["当{v}的那位", "干{v}的那个朋友", "做{v}的那个人"], ["{d}现在做什么工作？", "{d}是干哪一行的？"]),
     Attribute("height", ["一米八", "一米八五", "一米九", "一米五八", "一米六五", "一米七二", "一米七八", "一米六"],
               ["{e}个子真高，有{v}", "才发现{e}{v}，站一起显得我好矮", "{e}量了下身高，{v}"],
               ["{v}的那位", "个子{v}的那个亲戚朋友", "身高{v}的那个人"], ["{d}有多高？", "{d}个子多高？"]),
     Attribute("birthday", [f"{m}月{d}号" for m, d in ((3, 5), (4, 18), (5, 2), (6, 21), (7, 9), (8, 30), (9, 14), (10, 3), (11, 26), (12, 12), (1, 7), (2, 16))],
               ["{e}的生日是{v}", "{e}{v}过生日，记得准备礼物", "记一下，{e}生日在{v}"],
               ["{v}过生日的那位", "生日在{v}的那个人"], ["{d}生日是哪天？", "{d}几月几号过生日？"]),
     Attribute("pet", ["柯基", "柴犬", "金毛", "布偶猫", "橘猫", "边牧", "垂耳兔", "虎皮鹦鹉", "仓鼠", "比熊"],
               ["{e}家新养了一只{v}", "{e}抱回来一只{v}，天天晒", "{e}家的{v}拆家了"],
               ["养{v}的那位", "家里有只{v}的那个人"], ["{d}养的是什么宠物？", "{d}家里养了什么小动物？"]),
     Attribute("phone", ["iPhone 15", "华为Mate60", "小米14", "OPPO Find X7", "vivo X100", "荣耀Magic6", "三星S24", "一加12"],
               ["{e}换了台{v}", "{e}一直用的是{v}", "{e}的手机是{v}，拍照很清楚"],
               ["用{v}的那位", "手机是{v}的那个人"], ["{d}用的什么手机？", "{d}手机是哪款？"]),
     Attribute("hobby", ["攀岩", "钓鱼", "油画", "尤克里里", "滑板", "围棋", "烘焙", "飞盘", "潜水", "书法"],
               ["{e}最近迷上了{v}", "{e}周末都在练{v}", "{e}报了个{v}班"],
               ["迷上{v}的那位", "在学{v}的那个人"], ["{d}最近在玩什么？", "{d}的爱好是什么？"])])
ZH_EVENTS = Kind(
    ["美食节", "音乐节", "读书会", "马拉松", "技术沙龙", "同学聚会", "露营活动", "画展", "车展", "公司年会", "婚礼", "漫展"],
    [Attribute("length", ["连办三天", "只办一个下午", "持续一整周", "办两天", "从早到晚办一天", "前后办五天"],
               ["听说今年的{e}要{v}", "{e}这次{v}", "{e}据说会{v}"],
               ["{v}的那个活动", "要{v}的那个"], ["{d}在哪里举行？", "{d}地点定在哪？"]),
     Attribute("venue", ["滨江公园", "国际会展中心", "体育中心", "奥体中心", "老城区步行街", "湖边草坪", "市图书馆", "万象城中庭", "大学城礼堂", "创意园区"],
               ["{e}定在{v}举办", "{e}的场地在{v}", "{e}地点是{v}"],
               ["在{v}办的那个活动", "{v}的那场"], ["{d}在哪里举行？", "{d}地点定在哪？"]),
     Attribute("when", [f"{m}月{d}号" for m, d in ((3, 9), (4, 12), (5, 20), (6, 6), (7, 15), (8, 8), (9, 27), (10, 19), (11, 11), (12, 24))],
               ["{e}定在{v}", "{e}是{v}那天", "{e}的日子定了，{v}"],
               ["{v}那个活动", "{v}的那场"], ["{d}是哪天？", "{d}什么时候开始？"]),
     Attribute("ticket", ["八十八块", "一百二", "免费", "两百九十九", "五十块", "三百八", "六十六块", "一百九十九"],
               ["{e}门票{v}", "{e}的票{v}一张", "看了下{e}，票价{v}"],
               ["门票{v}的那个活动", "票价{v}的那场"], ["{d}门票多少钱？", "{d}的票价是多少？"]),
     Attribute("with", ["表哥", "同事", "闺蜜", "室友", "爸妈", "发小", "邻居", "前同事"],
               ["打算和{v}一起去{e}", "{v}约我去{e}", "{e}那天要陪{v}去"],
               ["约了{v}一起去的那个活动", "跟{v}去的那场"], ["{d}是和谁一起去？", "{d}我跟谁约的？"])])
ZH_ITEMS = Kind(
    [i for i, _ in zh_daily.ITEMS],
    [Attribute("price", ["一千二", "三百九", "两千八", "六百五", "八十九", "一千六", "四千三", "二百四", "五百五", "九百九"],
               ["{e}到手了，花了{v}", "{e}是{v}买的", "入了个{e}，{v}"],
               ["花了{v}买的那个东西", "{v}的那个"], ["{d}多少钱买的？", "{d}花了多少钱？"]),
     Attribute("shop", zh_daily.SHOPS, ["{e}是在{v}买的", "{v}下单了{e}", "去{v}挑了个{e}"],
               ["在{v}买的那个东西", "从{v}入的那个"], ["{d}在哪家店买的？", "{d}是哪儿买的？"]),
     Attribute("spot", zh_daily.HOME_SPOTS, ["{e}收进了{v}", "把{e}塞进{v}了", "备忘：{e}在{v}"],
               ["放在{v}的那个东西", "收在{v}的那个"], ["{d}放哪儿了？", "{d}收到哪里去了？"]),
     Attribute("colour", ["墨绿色", "雾霾蓝", "奶白色", "酒红色", "深灰色", "樱花粉", "卡其色", "亮黄色"],
               ["{e}选了{v}", "{e}是{v}的，很耐看", "{e}挑的{v}款"],
               ["{v}的那个东西", "挑了{v}的那个"], ["{d}是什么颜色？", "{d}选的哪个颜色？"]),
     Attribute("lent", ["小王", "老周", "阿杰", "思远", "佳琪", "老陈", "小林", "晓雯"],
               ["{e}借给{v}了", "{v}把我的{e}借走了", "{e}先放{v}那儿用几天"],
               ["借给{v}的那个东西", "{v}拿走的那个"], ["{d}现在在谁手上？", "{d}借给谁了？"])])
ZH_DIRECT = {"people": "我{e}", "events": "那个{e}", "items": "我的{e}"}
ZH_SECOND = ["另外，", "还有，", "顺便问下，", "对了，"]
ZH_CHAT = ["今天好热啊，空调开了一整天", "刚喝了杯拿铁，有点苦", "外面又下雨了，烦死了", "早上地铁挤得要命",
           "最近老是睡不好", "楼下的桂花开了，好香", "中午吃了碗牛肉面，撑", "这周过得好快啊", "刚开完会，脑子嗡嗡的",
           "周末想出去走走，天气预报说要降温"]
ZH_CORRECT = ["说错了，其实我想问", "不是这个，我要问的是", "哦不对，我真正想问的是", "算了不问这个了，我想知道的是",
              "等等，搞混了，应该是", "不对不对，我是想问"]
ZH_WRONG = ["我想问问", "对了，", "想起来一件事，"]

# --- English -------------------------------------------------------------------------------------------------

EN_PEOPLE = Kind(
    ["my cousin", "my coworker", "my college roommate", "my neighbour", "my landlord", "my uncle", "my sister-in-law",
     "my old school friend", "my team lead", "my climbing buddy", "my aunt", "my brother-in-law", "my former boss"],
    [Attribute("city", ["Denver", "Lisbon", "Austin", "Toronto", "Seattle", "Dublin", "Melbourne", "Portland", "Boston", "Osaka", "Prague", "Chicago"],
               ["{E} moved to {v} last month", "{E} says the new flat in {v} is finally set up", "Heard that {e} settled in {v}"],
               ["the one who moved to {v}", "the person who relocated to {v}"], ["{d}: what city are they in now?", "where does {d} live these days?"]),
     Attribute("job", ["paralegal", "nurse", "data analyst", "pastry chef", "flight attendant", "architect", "physiotherapist", "sound engineer", "bus driver", "tax adviser"],
               ["{E} retrained and works as a {v} now", "{E} took a job as a {v}", "{E} is a {v} these days, long shifts"],
               ["the one who became a {v}", "the person working as a {v}"], ["what does {d} do for a living?", "{d}: what's their job?"]),
     Attribute("height", ["six foot two", "five foot three", "six foot five", "five foot eight", "six foot", "five foot one"],
               ["{E} is really tall, {v}", "Turns out {e} is {v}, I looked tiny next to them", "{E} measured {v} at the checkup"],
               ["the one who is {v}", "the person who stands {v}"], ["how tall is {d}?", "{d}: what's their height?"]),
     Attribute("birthday", ["March 5", "April 18", "May 2", "June 21", "July 9", "August 30", "September 14", "October 3", "November 26", "December 12"],
               ["{E}'s birthday is {v}", "{E} turns a year older on {v}, need a present", "Note: {e} celebrates on {v}"],
               ["the one born on {v}", "the person whose birthday is {v}"], ["when is {d}'s birthday?", "what day does {d} celebrate?"]),
     Attribute("pet", ["corgi", "shiba inu", "golden retriever", "ragdoll cat", "ginger cat", "border collie", "lop rabbit", "budgie", "hamster", "beagle"],
               ["{E} just adopted a {v}", "{E} brought home a {v} and posts it daily", "{E}'s {v} chewed the sofa"],
               ["the one with the {v}", "the person who owns a {v}"], ["what pet does {d} have?", "{d}: what animal do they keep?"]),
     Attribute("phone", ["Pixel 8", "iPhone 15", "Galaxy S24", "OnePlus 12", "Xperia 1", "Nothing Phone 2", "Moto Edge", "Fairphone 5"],
               ["{E} switched to a {v}", "{E} has been on a {v} for ages", "{E}'s phone is a {v}, great camera"],
               ["the one using a {v}", "the person with the {v}"], ["which phone does {d} use?", "{d}: what phone is that?"]),
     Attribute("hobby", ["bouldering", "fly fishing", "oil painting", "ukulele", "skateboarding", "chess", "sourdough baking", "ultimate frisbee", "scuba diving", "calligraphy"],
               ["{E} got hooked on {v}", "{E} spends every weekend on {v}", "{E} signed up for a {v} class"],
               ["the one into {v}", "the person learning {v}"], ["what is {d} into lately?", "{d}: what's their hobby?"])])
EN_EVENTS = Kind(
    ["the food festival", "the jazz festival", "the book club meetup", "the half marathon", "the tech meetup", "the class reunion",
     "the camping trip", "the art fair", "the car show", "the company retreat", "the wedding", "the comic con"],
    [Attribute("length", ["runs for three days", "lasts a single afternoon", "goes on for a whole week", "runs two days", "takes a full day", "spans five days"],
               ["Heard {e} {v} this year", "{E} {v} this time", "Apparently {e} {v}"],
               ["the event that {v}", "the thing that {v}"], ["where is {d} held?", "{d}: what's the venue?"]),
     Attribute("venue", ["Riverside Park", "the convention centre", "the old town square", "Lakeside Lawn", "the city library", "Harbour Hall", "the sports arena", "the university auditorium"],
               ["{E} will be at {v}", "{E} is booked into {v}", "The venue for {e} is {v}"],
               ["the event at {v}", "the one happening at {v}"], ["where is {d} held?", "{d}: what's the venue?"]),
     Attribute("when", ["March 9", "April 12", "May 20", "June 6", "July 15", "August 8", "September 27", "October 19", "November 11"],
               ["{E} is set for {v}", "{E} falls on {v}", "Date for {e} is fixed: {v}"],
               ["the event on {v}", "the thing happening {v}"], ["when is {d}?", "{d}: what date does it start?"]),
     Attribute("ticket", ["$88", "$120", "free entry", "$299", "$50", "$380", "$66", "$199"],
               ["Tickets for {e} are {v}", "{E} costs {v} per ticket", "Checked {e}: {v}"],
               ["the event with tickets at {v}", "the one costing {v}"], ["how much are tickets for {d}?", "{d}: what's the ticket price?"]),
     Attribute("with", ["my cousin", "my roommate", "my parents", "my best friend", "my neighbour", "my coworker", "my sister", "my running club"],
               ["Planning to go to {e} with {v}", "{V} invited me to {e}", "I'm taking {v} to {e}"],
               ["the event I'm going to with {v}", "the one {v} invited me to"], ["who am I going to {d} with?", "{d}: who's coming with me?"])])
EN_ITEMS = Kind(
    ["the camera", "the projector", "the air fryer", "the espresso machine", "the hiking backpack", "the drone", "the e-reader",
     "the tent", "the standing desk", "the bike", "the monitor", "the blender", "the noise-cancelling headphones"],
    [Attribute("price", ["$1,200", "$390", "$2,800", "$650", "$89", "$1,600", "$430", "$240", "$550", "$990"],
               ["Got {e}, paid {v}", "{E} cost me {v}", "Bought {e} for {v}"],
               ["the thing I paid {v} for", "the {v} purchase"], ["how much did {d} cost?", "{d}: what did I pay?"]),
     Attribute("shop", ["IKEA", "Best Buy", "Costco", "Amazon", "a garage sale", "Decathlon", "the Apple Store", "a second-hand shop", "Target", "eBay"],
               ["{E} came from {v}", "Ordered {e} at {v}", "Picked up {e} at {v}"],
               ["the thing I got at {v}", "the {v} find"], ["where did I buy {d}?", "{d}: which shop was it?"]),
     Attribute("spot", ["the second desk drawer", "the box on top of the wardrobe", "the hallway closet", "under the bed", "the balcony cabinet", "the car trunk", "the kitchen top shelf", "the office locker"],
               ["Put {e} in {v}", "{E} is stored in {v} now", "Note to self: {e} is in {v}"],
               ["the thing stored in {v}", "whatever is in {v}"], ["where did I put {d}?", "{d}: where is it kept?"]),
     Attribute("colour", ["forest green", "dusty blue", "off-white", "burgundy", "charcoal", "blush pink", "khaki", "bright yellow"],
               ["Chose {e} in {v}", "{E} is {v}, looks great", "Went with the {v} version of {e}"],
               ["the {v} one", "the thing I got in {v}"], ["what colour is {d}?", "{d}: which colour did I pick?"]),
     Attribute("lent", ["Sam", "Priya", "Marco", "Lena", "Tom", "Aisha", "Jonas", "Mei"],
               ["Lent {e} to {v}", "{V} borrowed {e}", "{E} is at {v}'s place for a few days"],
               ["the thing {v} borrowed", "what I lent to {v}"], ["who has {d} right now?", "{d}: who did I lend it to?"])])
EN_DIRECT = {"people": "{e}", "events": "{e}", "items": "{e}"}
EN_SECOND = ["Also, ", "And another thing: ", "Oh, and ", "Plus, "]
EN_CHAT = ["It's boiling today, the AC has been on all day.", "Just had a latte, a bit bitter.", "It's raining again, ugh.",
           "The train was packed this morning.", "I haven't been sleeping well.", "The lilacs downstairs smell amazing.",
           "Had a huge bowl of ramen for lunch.", "This week flew by.", "Just got out of a long meeting, brain is fried.",
           "Thinking of a walk this weekend, though it's supposed to get cold."]
EN_CORRECT = ["wait, what I mean is", "sorry, scratch that, what I actually want to know is", "no, not that, my real question is",
              "hmm, wrong thing, I meant to ask", "actually, forget that, the question is", "oops, I mixed it up, I wanted to ask"]
EN_WRONG = ["I wanted to ask:", "Quick question,", "By the way,"]
EN_FILLER = ["so tired today", "the wifi keeps dropping", "what should I cook tonight", "finally Friday!", "my neck is sore from the desk",
             "saw a cute stray cat on the way home", "the delivery is late again", "watched two episodes, no regrets",
             "traffic was terrible", "the sunset was gorgeous tonight", "need to pay the electricity bill tomorrow",
             "group chat is way too active", "I think I'm catching a cold", "new bakery opened downstairs",
             "spent too much this month", "phone screen cracked, great", "three coffees today, heart racing", "lol that meme",
             "going to bed early", "the neighbours are renovating again"]


@dataclass(frozen=True)
class Language:
    kinds: dict[str, Kind]
    direct: dict[str, str]
    second: list[str]
    chat: list[str]
    correct: list[str]
    wrong: list[str]
    joiner: str  # between the parts of a question input


LANGS = {"zh": Language({"people": ZH_PEOPLE, "events": ZH_EVENTS, "items": ZH_ITEMS}, ZH_DIRECT, ZH_SECOND, ZH_CHAT,
                        ZH_CORRECT, ZH_WRONG, ""),
         "en": Language({"people": EN_PEOPLE, "events": EN_EVENTS, "items": EN_ITEMS}, EN_DIRECT, EN_SECOND, EN_CHAT,
                        EN_CORRECT, EN_WRONG, " ")}
ENTITIES = {"people": (5, 7), "events": (3, 4), "items": (3, 4)}


@dataclass
class Entity:
    kind: str
    mention: str
    facts: dict[str, tuple[str, int]]  # attribute key -> (value, message number)


def _fill(template: str, **values: str) -> str:
    """Format a template; {E}/{V} are {e}/{v} with a capital first letter (a sentence's start)."""
    upper = {k.upper(): v[:1].upper() + v[1:] for k, v in values.items()}
    return template.format(**values, **upper)


def _chatter(rng: random.Random, language: str) -> str:
    if language == "zh":
        return zh_daily.chatter(rng)
    return ", ".join(rng.sample(EN_FILLER, 1 if rng.random() < 0.6 else 2)).capitalize()


def generate(seed: int, language: str, shape: str) -> Conversation:
    """Return the conversation of one seed, language and shape (pure)."""
    rng = random.Random(f"{language}-{seed}")  # the same haystack for both shapes of a seed
    lang = LANGS[language]
    texts: list[str] = []
    entities: list[Entity] = []
    used: dict[str, set[str]] = {}
    for kind_name, (low, high) in ENTITIES.items():
        kind = lang.kinds[kind_name]
        for mention in rng.sample(kind.mentions, rng.randint(low, high)):
            entity = Entity(kind_name, mention, {})
            for attribute in rng.sample(kind.attributes, rng.randint(2, 3)):
                free = [v for v in attribute.values if v not in used.setdefault(attribute.key, set())
                        and v != mention]
                if not free:
                    continue
                value = rng.choice(free)
                used[attribute.key].add(value)
                text = _fill(rng.choice(attribute.say), e=mention, v=value)
                entity.facts[attribute.key] = (value, len(texts))
                texts.append(text)
            if len(entity.facts) >= 2:
                entities.append(entity)
    conversation = Conversation(seed, language, shape)
    order = _layout(rng, texts, language)
    day = date(2024, 1, 1) + timedelta(days=rng.randint(0, 300))
    ids: dict[int, str] = {}
    for index, (number, text) in enumerate(order):
        if rng.random() < 0.2:
            day += timedelta(days=rng.randint(1, 3))
        message_id = f"{conversation.id}:{index}"
        if number is not None:
            ids[number] = message_id
        padded = zh_daily.padded(rng, text) if language == "zh" else text
        conversation.messages.append(Message(message_id, padded, day.isoformat()))
    attributes = {k: {a.key: a for a in kind.attributes} for k, kind in lang.kinds.items()}
    asked: set[str] = set()
    for _ in range(40):  # eight distinct questions (a repeat is drawn again)
        question = (_chain if shape == "chain" else _ramble)(rng, lang, entities, attributes, ids)
        key = " ".join(question.evidence[:2] if shape == "chain" else question.evidence[:1])
        if key not in asked:
            asked.add(key)
            conversation.questions.append(question)
        if len(conversation.questions) == QUESTIONS:
            break
    return conversation


def _layout(rng: random.Random, texts: list[str], language: str) -> list[tuple[int | None, str]]:
    """Return the fact messages in a shuffled order with chatter between them: 150–230 messages in Chinese,
    300–420 in English (shorter messages: about the same tokens, so the newest messages alone do not hold it)."""
    low, high = (150, 230) if language == "zh" else (300, 420)
    length = max(len(texts) + 60, rng.randint(low, high))
    facts = list(range(len(texts)))
    rng.shuffle(facts)
    slots = set(rng.sample(range(length), len(texts)))
    queue = iter(facts)
    order: list[tuple[int | None, str]] = []
    for position in range(length):
        if position in slots:
            number = next(queue)
            order.append((number, texts[number]))
        else:
            order.append((None, _chatter(rng, language)))
    return order


Attributes = dict[str, dict[str, Attribute]]


def _direct(rng: random.Random, lang: Language, entity: Entity, attributes: Attributes,
            ids: dict[int, str], avoid: str | None = None) -> tuple[str, list[str], str]:
    """Return a direct question about one attribute of an entity named by its mention, its evidence, its answer."""
    keys = [k for k in entity.facts if k != avoid]
    key = rng.choice(keys)
    value, number = entity.facts[key]
    named = _fill(lang.direct[entity.kind], e=entity.mention)
    return _fill(rng.choice(attributes[entity.kind][key].ask), d=named), [ids[number]], value


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _chain(rng: random.Random, lang: Language, entities: list[Entity], attributes: Attributes,
           ids: dict[int, str]) -> Question:
    entity = rng.choice(entities)
    by, asked = rng.sample(list(entity.facts), 2)
    (by_value, by_number), (value, number) = entity.facts[by], entity.facts[asked]
    described = _fill(rng.choice(attributes[entity.kind][by].named), v=by_value)
    text = _sentence(_fill(rng.choice(attributes[entity.kind][asked].ask), d=described))
    evidence = [ids[by_number], ids[number]]
    if rng.random() < 0.35:
        other = rng.choice([e for e in entities if e is not entity])
        second, more, _ = _direct(rng, lang, other, attributes, ids)
        return Question(text + lang.joiner + rng.choice(lang.second) + second, "chain+1", evidence + more, value)
    return Question(text, "chain", evidence, value)


def _ramble(rng: random.Random, lang: Language, entities: list[Entity], attributes: Attributes,
            ids: dict[int, str]) -> Question:
    wanted, wrong, third = rng.sample(entities, 3)
    category = rng.choice(CATEGORIES["ramble"])
    parts = [_sentence(c) + ("。" if lang is LANGS["zh"] else "") for c in rng.sample(lang.chat, rng.randint(1, 2))]
    abandoned = [wrong] + ([third] if category == "ramble2" else [])
    for index, entity in enumerate(abandoned):
        question = _direct(rng, lang, entity, attributes, ids)[0]
        if index == 0:
            parts.append(_sentence(f"{rng.choice(lang.wrong)}{lang.joiner}{question}"))
        else:
            parts.append(f"{_sentence(rng.choice(lang.correct))}{lang.joiner}{question}")
    text, evidence, answer = _direct(rng, lang, wanted, attributes, ids)
    parts.append(f"{_sentence(rng.choice(lang.correct))}{lang.joiner}{text}")
    if category == "ramble+1":
        other = rng.choice([e for e in entities if e not in (wanted, wrong, third)])
        second, more, _ = _direct(rng, lang, other, attributes, ids)
        parts.append(rng.choice(lang.second) + second)
        evidence = evidence + more
    return Question(lang.joiner.join(parts), category, evidence, answer)
