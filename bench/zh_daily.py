"""A Chinese daily-life memory suite, generated from a seed: one user's messages, many threads interleaved.

Each conversation is 150–300 short messages one user sends to an assistant over a few months: facts about
people (relatives, colleagues, friends), places, items and events, spread over a dozen threads that interleave,
with off-topic chatter, typos, mixed scripts and emoji in between. Questions come from the same threads:

- single:  one message holds the answer (a colleague's new company, where an item was put, …)
- noisy:   as single, but the message carries typos, English words and emoji
- count:   how many times something happened; the evidence is every one of 2–6 messages
- list:    which things (films seen, cities visited, …); the evidence is every one of 2–6 messages
- compare: which of 2–5 messages holds the largest / cheapest value; the evidence is all of them
- changed: a fact stated and later changed (1–2 times); the evidence is the newest message only

Questions paraphrase their evidence where that is natural (几次去健身房 ← 练腿 / 跑步机 at 健身房), and names and
places recur in distractor messages, so a keyword match alone is not enough. `generate(seed)` is pure; dev
conversations use even seeds and test conversations odd ones (`seeds(split, n)`).
"""
# ruff: noqa: E501 (the templates read better as one Chinese sentence per line)

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta

from bench.locomo import Question

CATEGORIES = ("single", "noisy", "count", "list", "compare", "changed")
BASE_SEED = 17_000


@dataclass(frozen=True)
class Message:
    id: str
    text: str
    date: str


@dataclass
class Conversation:
    seed: int
    messages: list[Message] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"zh-daily-{self.seed}"

    @property
    def split(self) -> str:
        return "dev" if self.seed % 2 == 0 else "test"


def seeds(split: str, count: int) -> list[int]:
    """Return `count` seeds of a split: even for dev, odd for test (disjoint by construction)."""
    first = BASE_SEED + (0 if split == "dev" else 1)
    return [first + 2 * i for i in range(count)]


SURNAMES = list("王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶程苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤")
GIVEN = ["雨桐", "子涵", "浩然", "梓萱", "一鸣", "思远", "欣怡", "俊杰", "佳琪", "宇航", "晓雯", "志强", "婉清", "建国", "丽娟",
         "天佑", "若曦", "明轩", "诗涵", "嘉怡", "博文", "雅婷", "文静", "海涛", "晨曦", "立新", "秀英", "国栋", "梦琪", "家豪",
         "静怡", "子轩", "昊天", "书瑶", "振华", "凯文", "乐乐", "可欣", "亦凡", "安琪"]
NICKS = ["小{s}", "老{s}", "阿{g1}", "{g}"]
RELATIONS_F = ["表姐", "同事", "大学室友", "邻居", "前同事", "闺蜜", "高中同学", "瑜伽课认识的朋友", "组长", "房东", "小姨", "堂妹"]
RELATIONS_M = ["表哥", "同事", "大学室友", "邻居", "前同事", "发小", "高中同学", "球友", "组长", "房东", "舅舅", "堂弟"]
CITIES = ["杭州", "成都", "深圳", "南京", "武汉", "西安", "苏州", "厦门", "青岛", "长沙", "重庆", "昆明", "大连", "合肥", "郑州",
          "天津", "宁波", "福州", "济南", "哈尔滨", "贵阳", "南昌", "珠海", "无锡", "三亚", "桂林", "洛阳", "拉萨", "兰州", "温州"]
COMPANIES = ["字节", "腾讯", "阿里", "美团", "京东", "拼多多", "小米", "华为", "网易", "滴滴", "快手", "携程", "蔚来", "大疆", "百度",
             "顺丰", "招商银行", "平安", "宁德时代", "一家做新能源的创业公司", "一家外企咨询公司", "一所国际学校"]
JOBS = ["产品经理", "前端开发", "销售", "HR", "财务", "设计师", "数据分析", "运营", "律师助理", "英语老师", "测试", "市场专员"]
PETS = [("猫", ["橘猫", "英短", "布偶猫", "狸花猫", "小黑猫"]), ("狗", ["柯基", "柴犬", "金毛", "泰迪", "边牧", "比熊"]),
        ("仓鼠", ["仓鼠"]), ("兔子", ["垂耳兔"]), ("鹦鹉", ["虎皮鹦鹉"])]
PET_NAMES = ["豆豆", "糯米", "可乐", "团子", "芝麻", "布丁", "旺财", "年糕", "雪球", "奶茶", "花卷", "七七", "Lucky", "Coco", "土豆", "饺子"]
FOODS = ["花生", "海鲜", "芒果", "牛奶", "鸡蛋", "香菜", "辣椒", "虾", "菠萝", "坚果"]
ITEMS = [("降噪耳机", "耳机"), ("电动牙刷", "牙刷"), ("空气炸锅", "炸锅"), ("机械键盘", "键盘"), ("登山包", "背包"),
         ("保温杯", "杯子"), ("充电宝", "充电宝"), ("电子阅读器", "阅读器"), ("护眼台灯", "台灯"), ("瑜伽垫", "垫子"),
         ("咖啡机", "咖啡机"), ("榨汁机", "榨汁机"), ("折叠伞", "雨伞"), ("运动手环", "手环"), ("蓝牙音箱", "音箱"),
         ("双肩包", "包"), ("羽绒服", "羽绒服"), ("跑鞋", "鞋"), ("移动硬盘", "硬盘"), ("投影仪", "投影仪"),
         ("电饭煲", "电饭煲"), ("吸尘器", "吸尘器"), ("显示器", "显示器"), ("帐篷", "帐篷"), ("相机", "相机")]
SHOPS = ["宜家", "优衣库", "迪卡侬", "小米之家", "苹果店", "山姆", "盒马", "无印良品", "京东", "淘宝", "拼多多", "闲鱼", "开市客",
         "万达广场", "楼下超市", "大悦城", "一家二手店", "名创优品", "沃尔玛", "永辉"]
HOME_SPOTS = ["书房第二个抽屉", "衣柜顶上的收纳箱", "玄关鞋柜里", "床底下的箱子", "阳台储物柜", "电视柜左边", "厨房吊柜",
              "卧室床头柜", "车后备箱", "办公室工位抽屉"]
RESTAURANTS = ["海底捞", "西贝", "外婆家", "太二酸菜鱼", "绿茶餐厅", "一家日料店", "楼下的兰州拉面", "南京大排档", "鼎泰丰",
               "一家泰国菜", "费大厨", "巷子里的烧烤摊", "新开的火锅店", "必胜客", "云海肴"]
MOVIES = ["流浪地球2", "奥本海默", "封神", "热辣滚烫", "沙丘2", "周处除三害", "孤注一掷", "满江红", "飞驰人生2", "坚如磐石",
          "消失的她", "年会不能停", "第二十条", "长安三万里", "功夫熊猫4", "头脑特工队2"]
BOOKS = ["三体", "活着", "人类简史", "百年孤独", "置身事内", "额尔古纳河右岸", "长安的荔枝", "我与地坛", "原则", "明朝那些事儿",
         "杀死一只知更鸟", "被讨厌的勇气", "蛤蟆先生去看心理医生", "文城"]
WEEKDAYS = ["周一", "周二", "周三", "周四", "周五", "周六", "周日"]
EMOJI = ["😂", "🥵", "😭", "👍", "🙏", "🤔", "😴", "🎉", "💪", "🙃", "😅", "❤️", "🤣", "😮‍💨", "🍜", "☕"]
FILLER = ["今天好热啊{e}", "又下雨了，没带伞{e}", "困死了zzz", "刷了一晚上短视频，罪过{e}", "楼下装修吵了一上午", "好想吃火锅",
          "今天地铁好挤{e}", "lol 这个meme太好笑了", "周末啥也不想干", "emmm 不知道晚饭吃啥", "外卖又超时了{e}",
          "突然想起来明天要交电费", "今天的晚霞好好看{e}", "手机又卡了，该换了", "熬夜看球赛，明天肯定起不来", "哈哈哈哈哈",
          "早上差点迟到{e}", "新出的奶茶有点甜", "头有点疼，早点睡", "今天心情不错{e}", "ok 收到", "天气预报说明天降温",
          "追的剧更新了！{e}", "wifi 又断了，无语", "脖子好酸，得起来活动一下", "今天喝了三杯咖啡，心跳有点快",
          "好久没有好好睡一觉了", "下午开了三个会，脑子嗡嗡的", "刚才电梯坏了，爬了八楼{e}", "买的花开了🌸",
          "晚上随便煮了碗面", "看到一只超可爱的流浪猫", "今天 step 数破两万了", "群里又在抢红包", "周五了！！{e}",
          "想去海边", "好像感冒了，嗓子疼", "今天被老板表扬了一下{e}", "快递放驿站了，明天去拿", "公司楼下开了家新面包店",
          "周末打算宅家打游戏", "这个月花钱有点多了{e}", "晚上跟家里视频了一会儿", "今天跑腿的小哥超级客气",
          "刚发现手机膜裂了", "健康码那会儿真是麻烦，想想都累", "楼下的桂花开了，好香", "明天要早起，先睡了{e}"]
TYPOS = [("的", "得"), ("在", "再"), ("已经", "以经"), ("什么", "神马"), ("喜欢", "稀饭"), ("这样", "酱紫"), ("觉得", "jio得"),
         ("不知道", "不造"), ("真的", "真滴"), ("一下", "一哈")]
MIXED = [("会议", "meeting"), ("周末", "weekend"), ("朋友", "friend"), ("健身房", "gym"), ("咖啡", "coffee"), ("生日", "birthday"),
         ("礼物", "gift"), ("电影", "movie"), ("公司", "company"), ("买了", "入了"), ("快递", "package")]


PREFIXES = ["早上出门前想起来，", "午休的时候", "刚到家，", "下班路上", "晚上躺床上突然想到，", "趁着开会间隙记一下，", "今天",
            "周末在家收拾东西，", "刚刚", "跟你说个事，", "差点忘了，", "地铁上无聊，"]
SUFFIXES = ["，不过也还好", "，说起来有点好笑", "，明天再说吧", "，感觉这周过得好快", "，先记在这里", "，回头再看看",
            "，真是的", "，大家都挺开心的", "，累但是值得", "，希望下次顺利点", "。就这样吧", "，反正也不急"]


def padded(rng: random.Random, text: str) -> str:
    """Return text with the everyday clauses people wrap a fact in (they cost tokens and match nothing)."""
    if rng.random() < 0.5:
        text = rng.choice(PREFIXES) + text
    if rng.random() < 0.5:
        text += rng.choice(SUFFIXES)
    return text


class Builder:
    """Collects the threads of one conversation: each thread is an ordered list of messages and its questions."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.threads: list[list[tuple[str, str]]] = []  # per thread: (local key, text)
        self.pending: list[tuple[str, str, list[tuple[int, int]], str | None]] = []
        self.used_names: set[str] = set()
        self.used: dict[str, set[int]] = {}

    def pick(self, pool: str, size: int) -> int:
        """Return an index into a pool not used yet by this conversation (questions must stay unambiguous)."""
        taken = self.used.setdefault(pool, set())
        free = [i for i in range(size) if i not in taken] or list(range(size))
        choice = self.rng.choice(free)
        taken.add(choice)
        return choice

    def item(self) -> tuple[str, str]:
        return ITEMS[self.pick("item", len(ITEMS))]

    def thread(self, texts: list[str]) -> int:
        """Add a thread of messages (kept in this order); return its number."""
        self.threads.append([(f"{len(self.threads)}:{i}", t) for i, t in enumerate(texts)])
        return len(self.threads) - 1

    def ask(self, question: str, category: str, evidence: list[tuple[int, int]], answer: str | None) -> None:
        self.pending.append((question, category, evidence, answer))

    def person(self, female: bool | None = None) -> tuple[str, str]:
        """Return (relation, name) of a person not used yet in this conversation."""
        rng = self.rng
        female = rng.random() < 0.5 if female is None else female
        while True:
            surname, given = rng.choice(SURNAMES), rng.choice(GIVEN)
            style = rng.random()
            name = surname + given if style < 0.55 else ("小" + surname if style < 0.75 else ("老" + surname if style < 0.85 else given))
            if name not in self.used_names:
                self.used_names.add(name)
                return rng.choice(RELATIONS_F if female else RELATIONS_M), name


def noisy(rng: random.Random, text: str, strength: float) -> str:
    """Return text with typos, English words and emoji mixed in (with probability `strength` per kind)."""
    for right, wrong in rng.sample(TYPOS, 3):
        if right in text and rng.random() < strength:
            text = text.replace(right, wrong, 1)
    for word, other in rng.sample(MIXED, 3):
        if word in text and rng.random() < strength:
            text = text.replace(word, other, 1)
    if rng.random() < strength:
        text += rng.choice(["", " ", "～"]) + "".join(rng.sample(EMOJI, rng.randint(1, 2)))
    if rng.random() < strength / 2:
        text = rng.choice(["哈哈 ", "emm ", "对了 ", "btw ", "啊啊啊 "]) + text
    return text


# --- single-message facts (also used, noised, for the noisy category) ---------------------------------------


def fact_job(b: Builder) -> tuple[list[str], str, str]:
    rel, name = b.person()
    company, job = b.rng.choice(COMPANIES), b.rng.choice(JOBS)
    text = b.rng.choice([f"{rel}{name}说他跳槽去{company}了，做{job}", f"听说{name}（我{rel}）入职了{company}，岗位是{job}",
                         f"今天才知道{rel}{name}已经在{company}上班了", f"{name}拿到{company}的offer了，下周就去报到"])
    question = b.rng.choice([f"{name}现在在哪家公司工作？", f"{name}换工作去了哪里？", f"我{rel}{name}后来去哪上班了？"])
    return [text], question, company


def fact_pet(b: Builder) -> tuple[list[str], str, str]:
    rel, name = b.person()
    kind, breeds = b.rng.choice(PETS)
    pet = b.rng.choice(PET_NAMES)
    text = b.rng.choice([f"{rel}{name}家新来了一只{b.rng.choice(breeds)}，名字叫{pet}", f"{name}抱回来一只{b.rng.choice(breeds)}，取名{pet}，太萌了",
                         f"去{name}家玩，她家的{kind}{pet}一直蹭我"])
    question = b.rng.choice([f"{name}家的{kind}叫什么名字？", f"{name}养的宠物叫啥？"])
    return [text], question, pet


def fact_birthday(b: Builder) -> tuple[list[str], str, str]:
    rel, name = b.person()
    month, day = b.rng.randint(1, 12), b.rng.randint(1, 28)
    text = b.rng.choice([f"记一下：{rel}{name}的生日是{month}月{day}号", f"{name}{month}月{day}号过生日，到时候得准备点东西",
                         f"{rel}{name}说她生日在{month}月{day}号，今年想办个小聚会"])
    question = b.rng.choice([f"{name}哪天过生日？", f"{name}的生日是几月几号？"])
    return [text], question, f"{month}月{day}号"


def fact_allergy(b: Builder) -> tuple[list[str], str, str]:
    rel, name = b.person()
    food = b.rng.choice(FOODS)
    text = b.rng.choice([f"和{rel}{name}吃饭要注意，他对{food}过敏", f"{name}一碰{food}就起疹子，点菜时别点",
                         f"上次聚餐才知道{name}不能吃{food}"])
    question = b.rng.choice([f"{name}有什么忌口？", f"请{name}吃饭要避开什么？"])
    return [text], question, food


def fact_item_place(b: Builder) -> tuple[list[str], str, str]:
    item, alias = b.item()
    spot = b.rng.choice(HOME_SPOTS)
    text = b.rng.choice([f"{item}收到{spot}了，免得下次又找不到", f"把{item}塞进了{spot}", f"备忘：{item}在{spot}"])
    question = b.rng.choice([f"我的{alias}放哪儿了？", f"{alias}被我收到哪里去了？"])
    return [text], question, spot


def fact_item_lent(b: Builder) -> tuple[list[str], str, str]:
    item, alias = b.item()
    rel, name = b.person()
    text = b.rng.choice([f"{rel}{name}把我的{item}借走了，说下个月还", f"{item}借给{name}用几天", f"{name}来拿走了{item}，用完再还我"])
    question = b.rng.choice([f"我的{alias}借给谁了？", f"谁拿走了我的{alias}？"])
    return [text], question, name


def fact_meeting(b: Builder) -> tuple[list[str], str, str]:
    rel, name = b.person()
    place = b.rng.choice(RESTAURANTS)
    day = b.rng.choice(WEEKDAYS)
    text = b.rng.choice([f"和{rel}{name}约了{day}晚上在{place}吃饭", f"{name}说{day}去{place}聚一下，我答应了",
                         f"定了：{day}跟{name}{place}见"])
    question = b.rng.choice([f"我和{name}约在哪里吃饭？", f"跟{name}的饭局定在什么地方？"])
    return [text], question, place


def fact_price(b: Builder) -> tuple[list[str], str, str]:
    item, alias = b.item()
    shop = b.rng.choice(SHOPS)
    price = b.rng.randint(39, 2999)
    text = b.rng.choice([f"在{shop}买了{item}，花了{price}块", f"{item}到手了，{shop}下单，{price}元", f"入了个{item}，{price}，{shop}买的"])
    question = b.rng.choice([f"我的{alias}多少钱买的？", f"{alias}花了我多少钱？"])
    return [text], question, str(price)


FACTS: list[Callable[[Builder], tuple[list[str], str, str]]] = [
    fact_job, fact_pet, fact_birthday, fact_allergy, fact_item_place, fact_item_lent, fact_meeting, fact_price]


def add_single(b: Builder, noise: bool) -> None:
    fact = b.rng.choice(FACTS)
    texts, question, answer = fact(b)
    if noise:
        texts = [_noisy_keep(b.rng, texts[0], answer)]
    number = b.thread(texts)
    b.ask(question, "noisy" if noise else "single", [(number, 0)], answer)
    # Siblings: the same kind of fact about someone or something else (another birthday, another item put
    # away), never asked about: the question's topic alone does not find its message, its entity must.
    for _ in range(b.rng.randint(1, 2)):
        b.thread(fact(b)[0])


def _noisy_keep(rng: random.Random, text: str, keep: str) -> str:
    """Return a noised text that still contains `keep` (the answer) verbatim."""
    for _ in range(8):
        candidate = noisy(rng, text, 0.9)
        if keep in candidate:
            return candidate
    return text + rng.choice(EMOJI)


# --- several messages: count, list, compare ---------------------------------------------------------------


GYM = ["下班去健身房练了腿，明天肯定走不动", "今天在健身房跑步机上跑了{n}公里", "健身房私教课又被虐了{e}", "午休溜去健身房撸了会儿铁",
       "健身房人好多，等了半天深蹲架", "晚上去健身房游了{n}百米", "健身房新来的教练挺专业", "在健身房上了节动感单车课，汗如雨下"]
HOME_VISIT = ["周末回爸妈家吃饭，妈妈做了红烧肉", "回了趟老家看爸妈", "去爸妈那儿帮忙修了下热水器", "陪爸妈在家包饺子",
              "回爸妈家过了个周末，又被催婚了{e}", "下班顺路回爸妈家，我爸又在研究象棋"]
OVERTIME = ["今天又加班到十点{e}", "项目上线，通宵了", "周六被叫去公司加班", "又是加班的一天，晚饭在工位吃的",
            "加班到十一点，打车回家", "加班赶方案，十二点才到家"]
COUNTS = [("健身房", GYM, ["这段时间我去了几次健身房？", "我一共去健身房锻炼过几回？"],
           ["健身房门口新开了家奶茶店", "健身房的年卡快到期了，要不要续呢", "本来想去健身房，结果下雨就没去",
            "同事说他们健身房在搞活动"]),
          ("回爸妈家", HOME_VISIT, ["我最近回了几次爸妈家？", "这阵子我去看过爸妈几次？"],
           ["爸妈说下个月想出去旅游", "给爸妈买了个按摩仪", "这周本来要回爸妈家，临时有事没回成", "妈妈打电话问我什么时候回家"]),
          ("加班", OVERTIME, ["我最近加了几次班？", "这段时间我加班了多少次？"],
           ["听说隔壁组天天加班", "加班费这个月还没发", "今天终于没加班，准点下班！", "老板说下周可能要加班"])]


def add_count(b: Builder) -> None:
    _, pool, questions, distractors = COUNTS[b.pick("count", len(COUNTS))]
    n = b.rng.randint(2, 6)
    texts = [t.format(n=b.rng.randint(2, 10), e=b.rng.choice(EMOJI)) for t in b.rng.sample(pool, min(n, len(pool)))]
    number = b.thread(texts)
    b.ask(b.rng.choice(questions), "count", [(number, i) for i in range(len(texts))], None)
    for text in b.rng.sample(distractors, 2):
        b.thread([text])


def add_list(b: Builder) -> None:
    kind = b.pick("list", 3)
    n = b.rng.randint(2, 6)
    if kind == 0:
        movies = b.rng.sample(MOVIES, n)
        texts = [b.rng.choice([f"刚看完《{m}》，结局有点仓促", f"和朋友去电影院看了《{m}》", f"《{m}》真好看，推荐{b.rng.choice(EMOJI)}",
                               f"周末补了《{m}》，一般般"]) for m in movies]
        question = b.rng.choice(["我最近都看了哪些电影？", "这阵子我在电影院看过什么片子？"])
        near = [f"《{m}》的票好难买，还没看成" for m in b.rng.sample([m for m in MOVIES if m not in movies], 2)]
    elif kind == 1:
        cities = b.rng.sample(CITIES, n)
        texts = [b.rng.choice([f"明天出差去{c}，又要早起赶高铁", f"在{c}出差，酒店还不错", f"{c}这趟差终于跑完了",
                               f"被派去{c}出差三天"]) for c in cities]
        question = b.rng.choice(["我这段时间都去哪些城市出过差？", "我出差跑过哪几个地方？"])
        near = [f"{b.person()[1]}去{c}出差了，羡慕" for c in b.rng.sample([c for c in CITIES if c not in cities], 2)]
    else:
        books = b.rng.sample(BOOKS, n)
        texts = [b.rng.choice([f"读完了《{x}》，后劲很大", f"睡前在看《{x}》", f"又买了本《{x}》，书架要放不下了",
                               f"《{x}》看了一半，有点啃不动"]) for x in books]
        question = b.rng.choice(["我最近读了哪些书？", "这段时间我都在看什么书？"])
        near = [f"{b.person()[1]}推荐我读《{x}》，先加进书单" for x in b.rng.sample([x for x in BOOKS if x not in books], 2)]
    number = b.thread(texts)
    b.ask(question, "list", [(number, i) for i in range(n)], None)
    for text in near:
        b.thread([text])


def add_compare(b: Builder) -> None:
    if b.pick("compare", 2) == 0:
        item, alias = b.item()
        n = b.rng.randint(2, 4)
        shops = b.rng.sample(SHOPS, n)
        prices = b.rng.sample(range(99, 3000), n)
        texts = [b.rng.choice([f"{shop}的{item}标价{p}，再看看", f"看了下{shop}，{item}要{p}块", f"{item}在{shop}卖{p}"])
                 for shop, p in zip(shops, prices, strict=True)]
        answer = shops[prices.index(min(prices))]
        question = b.rng.choice([f"我比价的那几家店，哪家的{alias}最便宜？", f"{alias}哪家卖得最便宜？"])
        near = [f"{b.person()[1]}说{b.rng.choice(SHOPS)}的{alias}质量一般", f"{alias}的测评视频看了好几个，眼花"]
    else:
        n = b.rng.randint(2, 5)
        distances = b.rng.sample(range(3, 22), n)
        texts = [b.rng.choice([f"晨跑{d}公里，配速还行", f"今天沿江跑了{d}公里{b.rng.choice(EMOJI)}", f"夜跑打卡：{d}km",
                               f"周末长距离，跑了{d}公里，腿软"]) for d in distances]
        answer = str(max(distances))
        question = b.rng.choice(["我跑步最远的一次跑了多少公里？", "我最长的一次跑步是多远？"])
        near = [f"{b.person()[1]}跑了个全马，太强了", "跑鞋该换了，鞋底磨平了", "今天想跑步，结果懒得动"]
    number = b.thread(texts)
    b.ask(question, "compare", [(number, i) for i in range(len(texts))], answer)
    for text in near:
        b.thread([text])


def add_changed(b: Builder) -> None:
    kind = b.pick("changed", 4)
    changes = b.rng.randint(1, 2)
    if kind == 0:
        rel, name = b.person()
        values = b.rng.sample(CITIES, changes + 1)
        texts = [f"{rel}{name}在{values[0]}租了房子，安顿下来了"] + [
            b.rng.choice([f"{name}又搬家了，这次搬去了{v}", f"{name}说工作调动，现在住{v}了", f"{name}最后还是去了{v}定居"])
            for v in values[1:]]
        question = b.rng.choice([f"{name}现在住在哪个城市？", f"{name}目前在哪儿生活？"])
        near = f"{b.person()[1]}也在{b.rng.choice(CITIES)}住过几年，说那边吃的不错"
    elif kind == 1:
        values = [f"B{b.rng.randint(1, 3)}-{b.rng.randint(100, 399)}" for _ in range(changes + 1)]
        texts = [f"新租的车位是{values[0]}，记住"] + [b.rng.choice([f"车位换了，现在是{v}", f"物业把我的车位调到{v}了"])
                                                      for v in values[1:]]
        question = b.rng.choice(["我的车位号是多少？", "车停在哪个车位？"])
        near = f"{b.person()[1]}的车老是停在B{b.rng.randint(1, 3)}-{b.rng.randint(100, 399)}，挡着别人"
    elif kind == 2:
        values = b.rng.sample(WEEKDAYS[:5], changes + 1)
        texts = [f"组里的周会定在每{values[0]}上午"] + [b.rng.choice([f"周会改到{v}了", f"通知：以后周会挪到{v}开"])
                                                          for v in values[1:]]
        question = b.rng.choice(["我们组的例会是星期几？", "周会现在哪天开？"])
        near = f"隔壁组的周会在{b.rng.choice(WEEKDAYS[:5])}，他们开得特别久"
    else:
        values = [f"{b.rng.choice(['Home', 'Wifi', 'Mi'])}{b.rng.randint(1000, 9999)}" for _ in range(changes + 1)]
        texts = [f"家里wifi密码设成了{values[0]}"] + [b.rng.choice([f"wifi密码改了，新的是{v}", f"路由器重置了，密码现在是{v}"])
                                                        for v in values[1:]]
        question = b.rng.choice(["家里的无线网密码是什么？", "我家wifi密码是啥？"])
        near = f"公司访客wifi密码是Guest{b.rng.randint(1000, 9999)}，记一下方便同事"
    number = b.thread(texts)
    b.ask(question, "changed", [(number, len(texts) - 1)], values[-1])
    b.thread([near])


def distractor(b: Builder) -> str:
    """Return a message that mentions people, places or items of the suite without answering anything."""
    rel, name = b.person()
    return b.rng.choice([f"{rel}{name}发了条朋友圈，去{b.rng.choice(CITIES)}玩了", f"在{b.rng.choice(SHOPS)}逛了一圈什么都没买",
                         f"想买个{b.rng.choice(ITEMS)[0]}，还在犹豫", f"{name}推荐我去{b.rng.choice(RESTAURANTS)}，有空试试",
                         f"{b.rng.choice(MOVIES)}的预告片出了", f"路过{b.rng.choice(RESTAURANTS)}，排队的人好多",
                         f"{name}问我要不要一起去健身房", f"{b.rng.choice(CITIES)}下大雪了，{name}发来照片"])


def chatter(rng: random.Random) -> str:
    """Return an off-topic message: one or two everyday remarks, with some noise."""
    said = [rng.choice(FILLER).format(e=rng.choice(EMOJI)) for _ in range(1 if rng.random() < 0.6 else 2)]
    return noisy(rng, "，".join(said), 0.3)


def generate(seed: int) -> Conversation:
    """Return the conversation of one seed (pure: the same seed gives the same conversation)."""
    rng = random.Random(seed)
    b = Builder(rng)
    plan = (["single"] * rng.randint(3, 5) + ["noisy"] * rng.randint(1, 3) + ["count"] * rng.randint(1, 2)
            + ["list"] * rng.randint(1, 2) + ["compare"] * rng.randint(1, 2) + ["changed"] * rng.randint(2, 3))
    for kind in plan:
        {"single": lambda: add_single(b, False), "noisy": lambda: add_single(b, True), "count": lambda: add_count(b),
         "list": lambda: add_list(b), "compare": lambda: add_compare(b), "changed": lambda: add_changed(b)}[kind]()
    length = rng.randint(150, 300)
    keyed = [msg for thread in b.threads for msg in thread]
    extra = max(0, length - len(keyed))
    fillers = [(None, distractor(b) if rng.random() < 0.35 else chatter(rng)) for _ in range(extra)]
    # Interleave: each thread keeps its order, spread over the whole conversation; fillers go anywhere.
    slots = sorted(rng.sample(range(length if extra else len(keyed)), len(keyed)))
    order = list(range(len(b.threads)))
    queues = [list(t) for t in b.threads]
    sequence: list[tuple[str | None, str]] = []
    for _ in slots:
        live = [t for t in order if queues[t]]
        sequence.append(queues[rng.choice(live)].pop(0))
    merged: list[tuple[str | None, str]] = []
    keyed_iter, filler_iter, slot_set = iter(sequence), iter(fillers), set(slots)
    for position in range(len(slots) + len(fillers)):
        merged.append(next(keyed_iter) if position in slot_set else next(filler_iter))
    conversation = Conversation(seed)
    ids: dict[str, str] = {}
    day = date(2024, 1, 1) + timedelta(days=rng.randint(0, 300))
    for index, (key, text) in enumerate(merged):
        if rng.random() < 0.25:
            day += timedelta(days=rng.randint(1, 3))
        message_id = f"{conversation.id}:{index}"
        if key is not None:
            ids[key] = message_id
        conversation.messages.append(Message(message_id, padded(rng, text), day.isoformat()))
    for question, category, evidence, answer in b.pending:
        conversation.questions.append(Question(question, category, [ids[f"{t}:{i}"] for t, i in evidence], answer))
    return conversation
