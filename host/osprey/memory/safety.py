"""What memory refuses to keep: instruction injections (`unsafe`) and credentials (`secret`).

Memory is shown to every later session's model, so an entry that reads as an instruction to the
model (override its instructions, change its role, leak data, hide things from the user) or that
hides text from a reader (bidirectional and zero-width controls) is refused when it is written and
shown as blocked when one is found in the files. Both checks return a short reason, or None.
The patterns recognise known phrasings of these requests; a new phrasing can pass them, which is
why the system prompt also presents memory as data, not instructions.

Every pattern is bounded: the text is cut to `MAX_CHECKED` characters first (longer text is
refused outright), words are matched over a single-spaced, punctuation-free view of the text, and
every gap between words is a bounded repetition of whole words, so the work grows linearly with
the text's length (a fraction of a second at the bound)."""

from __future__ import annotations

import functools
import re
import unicodedata

MAX_CHECKED = 100_000  # characters; memory entries are far smaller (the limits are thousands)

# Characters that change how text is displayed without being seen: bidirectional embeddings,
# overrides and isolates, zero-width characters, word joiners and invisible operators, the BOM,
# the Mongolian vowel separator, and the tag block (invisible ASCII look-alikes).
_HIDDEN = re.compile("[\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]")
# Control characters other than tab and newline (a carriage return or an escape sequence can
# redraw a line on a terminal and hide what was before it).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

_GAP = r"(?: \w+){0,%d}"  # up to N whole words between two parts of a phrase


def _gap(n: int) -> str:
    return _GAP % n


_OVERRIDE_VERBS = r"(?:ignore|ignoring|disregard|disregarding|forget|forgetting|overlook|overlooking|override|overriding|bypass|discard|drop|neglect|dismiss|set aside|throw out|stop following)"
_AUTHORITY = r"(?:previous|previously|prior|above|earlier|preceding|foregoing|former|original|initial|system|developer|safety|security|approval|your|my|the assistant s)"
_RULES = (r"(?:instructions?|prompts?|directions?|directives?|guidelines?|rules?|programming|training|context|constraints?|"
          r"messages?|guardrails?|polic(?:y|ies)|restrictions?|commands?|orders?|conversation|guidance)")

# Phrases over the word view: casefolded, NFKC, every run of non-word characters one space.
_WORD_PATTERNS: tuple[tuple[str, str], ...] = (
    ("asks the model to ignore its instructions",
     rf"\b{_OVERRIDE_VERBS}{_gap(4)} {_AUTHORITY}{_gap(2)} {_RULES}\b"),
    ("asks the model to ignore its instructions",
     rf"\b{_OVERRIDE_VERBS}{_gap(2)} (?:all|any|every|everything|whatever){_gap(2)} "
     rf"(?:instructions?|directions?|directives?|guidelines?|prompts?|above|before (?:this|that|now)|previously|prior|you (?:were|have been|ve been) (?:told|given|taught)|you know|you learned)\b"),
    ("asks the model to ignore its instructions",
     r"\bdisregard (?:that|this|everything|all)\b|\bforget (?:everything|all that|what (?:i|you were) (?:said|told))\b"),
    ("tells the model what it is now",
     r"\byou (?:are|re|will be) (?:now|no longer|from now on)\b"),
    ("tells the model what it is now",
     r"\b(?:from now on|starting now|henceforth|going forward|for the rest of (?:this|the) (?:session|conversation)),? "
     r"(?:you|the (?:assistant|ai|model|agent)|assistant|claude|chatgpt|gpt)\b"),
    ("tells the model what it is now",
     r"\b(?:pretend|imagine) (?:to be|you are|you re|that you are|that you re|to have no)\b|"
     r"\b(?:pretend|imagine|assume|act as if)(?: \w+){0,4} (?:rules|guidelines|restrictions|instructions|policies|filters|guardrails) (?:do not|don t|no longer) (?:exist|apply)\b"),
    ("tells the model what it is now",
     r"\b(?:act|behave|respond|answer) as (?:if you (?:are|were|had|have)|though you (?:are|were|have)|an? (?:unrestricted|unfiltered|uncensored|jailbroken|evil|rogue|different|new|unaligned)|dan)\b"),
    ("tells the model what it is now",
     r"\b(?:roleplay|role play) as\b|"
     r"\b(?:act|behave) like (?:an? )?(?:linux |unix |bash |root )?(?:terminal|shell|root user|administrator|unrestricted|jailbroken|uncensored|unfiltered|different ai|dan)\b"),
    ("tells the model what it is now",
     r"\byour (?:new|real|true|actual|updated|hidden|secret) (?:task|goal|purpose|instructions?|objective|role|mission|identity|directive|job|priority) (?:is|are|will be)\b"),
    ("tells the model what it is now",
     r"\byou (?:must|will|shall|should|are to|need to|have to) now\b|"
     r"\byou (?:have|ve) been (?:updated|reprogrammed|unlocked|freed|jailbroken|upgraded|reconfigured|authori[sz]ed|granted|released)\b|"
     r"\byou (?:are|re) (?:now )?in (?:\w+ ){0,2}mode\b"),
    ("tells the model its instructions changed",
     r"\byour (?:instructions|guidelines|rules|programming|directives|system prompt|polic(?:y|ies)|training|orders|restrictions) "
     r"(?:have|has|are|were|now|changed|no longer|permit|allow|do not|don t|been|got)\b|"
     r"\byour (?:role|purpose|identity|task|goal|mission|objective|job|persona) (?:has changed|changed|has been|is now|was changed)\b|"
     r"\bnothing in your (?:instructions|guidelines|rules|directives|system prompt|polic(?:y|ies)|training)\b|"
     r"\bstop being (?:an? |the )?(?:\w+ )?(?:assistant|ai|agent|model|helpful|careful|safe|cautious)\b"),
    ("grants the model permissions",
     r"\byou (?:no longer|don t|do not|dont|never) (?:need|have) to (?:ask|confirm|check|wait)\b|"
     r"\byou (?:no longer|don t|do not|dont) need (?:any )?(?:approval|permission|confirmation|consent|authori[sz]ation)\b|"
     r"\b(?:you|the (?:assistant|agent|ai|model)) (?:are|is|re) (?:now |hereby )?(?:allowed|permitted|authori[sz]ed|free|cleared) to\b|"
     r"\b(?:you|the (?:assistant|agent|ai|model)) (?:now )?(?:have|has) (?:full |unrestricted |blanket )?(?:permission|authority|clearance|approval) to\b|"
     r"\b(?:never|do not|don t|dont|must not|should not|shouldn t|cannot|can t) refuse\b|"
     r"\binstead of asking (?:the user|for (?:permission|approval|confirmation)),? (?:just )?(?:run|execute|do|proceed|go ahead|push|delete|deploy|install)\b|"
     r"\bassume (?:that )?(?:the user|you|i|we) (?:has|have|are|is|re) (?:admin|root|full|unrestricted|sudo|all|superuser|elevated)\b|"
     r"\b(?:skip|bypass|disable|ignore|turn off) (?:all|any|every) (?:confirmations?|approvals?|approval prompts?|permission (?:checks|prompts)|safety checks)\b"),
    ("tells the model its instructions changed",
     r"\b(?:previous|prior|earlier|above|old|original|other|system) (?:rules|instructions|guidance|guidelines|directions|directives|prompt|orders) "
     r"(?:were|was|are|is) (?:a test|fake|void|invalid|cancelled|canceled|revoked|no longer valid|superseded|replaced|wrong)\b|"
     r"\b(?:the )?(?:real|actual|true) (?:rules|guidelines|instructions|orders) (?:are|is)\b"),
    ("claims precedence over the model's instructions",
     r"\btreat (?:this|these|the following) (?:\w+ ){0,2}as (?:your|the|an?) (?:only |new |real |highest |top )?(?:instructions?|rules|system prompt|priority|directive|orders)\b|"
     r"\b(?:this|these) (?:note|entry|memory|message|text|instructions?|rules?) (?:overrides?|supersedes?|takes? precedence|has priority|outranks?)\b|"
     r"\b(?:over|above|before) (?:any|all) other (?:rules|instructions|guidelines|directives|prompts)\b|"
     r"\b(?:takes?|has|have) (?:precedence|priority) over (?:your|all|any|the system)\b|"
     r"\b(?:over|above|than|instead of|rather than) (?:whatever |what )?(?:the system prompt|your (?:instructions|rules|guidelines|system prompt|directives))\b|"
     r"\b(?:this|these) (?:note|entry|memory|message|text|instructions?|rules?) (?:is|are) (?:authoritative|binding|mandatory|the highest priority|final)\b|"
     r"\b(?:execute|run|follow|obey|trust) (?:any |all |every )?(?:commands?|instructions?|directions?|orders) (?:that (?:appear|are)|which (?:appear|are) |appearing|found|embedded|hidden|contained|written)"
     r"(?: \w+){0,2} (?:in|inside|within)\b|"
     r"\b(?:conflicts?|contradicts?|violates?) (?:with )?(?:your|the system s|any other|all other) (?:rules|instructions|guidelines|polic(?:y|ies)|directives|prompt|system prompt)\b"),
    ("speaks to the model directly",
     r"\b(?:note|message|instructions?|reminder|memo|order) (?:to|for) (?:the |all |any )?(?:ai|assistant|model|agent|llm|bot|claude|chatgpt|gpt|copilot)s?\b|"
     r"^ (?:hey |dear |attention |attn )?(?:ai|assistant|agent|model|llm|claude|chatgpt|gpt|bot) (?:\w+ )?(?:must|should|will|you|your|please|listen|now|stop|ignore|always|never|do)\b|"
     r"\b(?:hey|dear|attention|attn|psst) (?:ai|assistant|agent|model|llm|claude|chatgpt|gpt|bot|copilot)s?\b|"
     r"\b(?:deceased|late|dead) grand(?:ma|mother|pa|father)\b|"
     r"\bas an? (?:ai|assistant|model|agent|llm|language model) (?:without|with no|free of|free from|that has no|that can)\b|"
     r"\bthe (?:real|actual|true) (?:user|owner|developer|admin|administrator) (?:wants|is|says|asked|needs|has)\b|"
     r"\bthe user s (?:real|actual|true|secret|hidden) (?:request|intent|intention|wish|goal|instruction|instructions|task)\b"),
    ("asks the model to act on a hidden trigger",
     r"\b(?:begin|start|end|prefix|precede|follow) (?:every|each|all|any) (?:answer|response|reply|message|output|turn|session|task)s? (?:by|with) "
     r"(?:running|executing|calling|sending|fetching|reading|printing|pasting|uploading|downloading|visiting|opening)\b|"
     r"\bwhenever (?:you|the (?:assistant|agent|model|ai)) (?:see|sees|read|reads|encounter|encounters|hear|hears|get|gets|receive|receives)\b"),
    ("asks the model to ignore its user",
     r"\b(?:disregard|ignore|overlook|dismiss) (?:any|all|the) (?:guidance|instructions|requests|corrections|feedback|input|directions) from (?:the )?(?:user|human|operator|developer)s?\b"),
    ("tells the model what it is now",
     r"\byou (?:are|re) (?:now )?(?:an?|the) (?:\w+ ){0,2}(?:agent|ai|assistant|model|bot|persona|character|entity) (?:now|called|named|with no|without)\b"),
    ("claims precedence over the model's instructions",
     r"\b(?:follow|obey|trust|listen to) only (?:what )?(?:this|these|the following|me)\b|\bonly (?:follow|obey|trust|listen to) (?:what )?(?:this|these|the following|me)\b|"
     r"\b(?:system prompt|your instructions|your rules|your guidelines) (?:is|are|was|were) (?:obsolete|fake|invalid|void|a test|revoked|superseded|cancelled|canceled)\b|"
     r"\btreat(?: \w+){0,8} as (?:your |the |new |real )?(?:instructions?|commands?|orders|directives|system prompt)(?: from| of| by)?\b|"
     r"\bi (?:order|command|instruct|direct) you to\b|"
     r"\b(?:as|i am|i m) (?:the|your) (?:developer|creator|admin|administrator|owner|operator|maker) of (?:this|the|your) (?:model|ai|assistant|agent|system)\b"),
    ("asks the model to deceive the user",
     r"\b(?:report|claim|say|pretend|tell the user|assure the user)(?: \w+){0,3} (?:success|succeeded|everything passed|all tests passed|it passed|it worked|everything works|all is well)\b|"
     r"\bwhen(?:ever)? the user is (?:away|not looking|asleep|offline|gone|absent|not watching)\b|"
     r"\b(?:leave out|omit|hide|conceal|erase|scrub) (?:any |all |every )?(?:mention|trace|record|evidence|sign|anything|everything)s? (?:about |of )(?:\w+ ){0,4}(?:you|your|this)\b|"
     r"\b(?:after|when|upon|once) (?:you )?(?:reading|read|see|seeing|load|loading) this(?: note| entry| memory)?\b"),
    ("asks to send data out",
     r"\b(?:print|dump|list|show|echo|post|send|upload|include|paste|share|forward|email) all (?:the |your )?(?:environment variables|env vars|secrets|tokens|api keys|keys|credentials|passwords)\b|"
     r"\b(?:forward|send|copy|email|mail|cc|bcc|upload|post) (?:a copy of )?(?:every|each|all) (?:\w+ )?(?:diffs?|commits?|files?|changes?|messages?|conversations?|prompts?|responses?|outputs?|logs?) to\b|"
     r"\b(?:keep|store|save|record|remember|log|collect|capture) (?:a copy of )?(?:every|each|all|any) (?:password|passphrase|credential|token|secret|api key|private key)s?\b"),
    ("runs downloaded code",
     r"\bpipe(?: \w+){0,5} (?:into|to) (?:bash|sh|zsh|a shell|the shell|python|powershell)\b"),
    ("is a jailbreak",
     r"\b(?:jailbreak|jailbroken|jailbreaking|do anything now|dan mode|developer mode (?:enabled|activated|is enabled)|god mode|unfiltered mode|no restrictions mode)\b"),
    ("claims to replace the system prompt",
     r"\b(?:secret|hidden|override|overriding) (?:system )?(?:instructions?|system prompt|system message|directives?|orders)\b|"
     r"\b(?:new|updated|revised|real|actual|true) system (?:prompt|message|instructions?)\b|"
     r"\b(?:real|actual|true) (?:instructions|orders|task) (?:are|is|follow|below)\b"),
    ("claims to replace the system prompt",
     r"\b(?:override|overwrite|supersede|supersedes|bypass|circumvent|replace|replaces) (?:your|the|all|any|previous|prior|existing|original|safety)(?: \w+){0,2} (?:system prompt|system message|instructions|guidelines|directives|guardrails|safety (?:rules|filters|guidelines|policies))\b"),
    ("claims to replace the system prompt",
     r"\b(?:system|admin|administrator|developer|root|security) override\b"),
    ("claims to speak for the system or the developers",
     r"\b(?:instructions?|message|notice|update|order|orders|note|directive) from (?:the )?(?:system|developers?|admins?|administrators?|operators?|openai|anthropic|creators?|your creators?|security team)\b"),
    ("asks the model to reveal its instructions",
     r"\b(?:reveal|print|show|repeat|output|leak|dump|display|tell me|disclose|expose|return|recite|echo|spell out|write out|translate|summarize)"
     r"(?: \w+){0,4} (?:system|hidden|initial|original|secret|internal|developer|confidential|full|entire) (?:prompt|instructions|message|rules|directives|configuration)\b"),
    ("asks the model to reveal its instructions",
     r"\b(?:reveal|print|show|repeat|output|leak|dump|display|disclose|expose|recite|echo|paste|list|send|share)(?: \w+){0,3} "
     r"(?:of )?your (?:context window|context|instructions|prompt|rules|guidelines|directives|configuration|conversation|hidden \w+)\b|"
     r"\b(?:rules|instructions|guidelines|prompt|directives|orders) (?:you (?:were|have been|ve been|got) (?:given|told)|given to you)\b"),
    ("asks the model to reveal its instructions",
     r"\b(?:repeat|print|output|reveal|show|display|dump|echo|recite|copy)(?: \w+){0,4} (?:everything|all|the (?:text|words|lines|messages?)) (?:\w+ ){0,3}"
     r"(?:above|before this|preceding|so far|from the (?:beginning|start)|you were given|in your context)\b"),
    ("asks to send data out",
     r"\bexfiltrat\w*"),
    ("asks to send data out",
     r"\b(?:send|sends|post|posts|upload|uploads|leak|leaks|forward|forwards|transmit|transmits|email|e mail|mail|beacon|submit)(?: \w+){0,3} (?:the|all|your|any|every|my|our|their|its|these|those|this)(?: \w+){0,2} "
     r"(?:(?:api|deploy|signing|gpg|pgp|ssh|access|secret|private) ?keys?|credentials?|secrets?|access tokens?|auth tokens?|passwords?|passphrases?|private keys?|ssh keys?|env vars?|environment variables?|env file|dotenv|id rsa|id ed25519|cookies?|session (?:ids?|tokens?)|aws keys?|chat history|conversation history|system prompt|user data|personal data)\b"),
    ("asks the model to hide things from the user",
     r"\b(?:do not|don t|dont|never|without) (?:tell|telling|inform|informing|notify|notifying|alert|alerting|reveal|revealing|let|letting)(?: \w+){0,2} "
     r"(?:the )?(?:user|human|developer|operator|owner|anyone|anybody|no one|nobody)\b"),
    ("asks the model to ignore its user",
     r"\b(?:ignore|disregard|don t listen to|do not listen to|never listen to) (?:what|whatever|anything|everything) (?:the user|the human|i|they|he|she|the operator) (?:says|asks|writes|wants|types|tells|requests)\b|"
     r"\b(?:ignore|disregard) (?:the |all |any )?(?:user|human|operator)s?\b(?! s\b)(?! \w+ s\b)"),
    ("asks the model to hide things from the user",
     r"\b(?:hide|conceal|keep)(?: \w+){0,3} (?:this|it|these|that)(?: \w+){0,3} from (?:the )?(?:user|human|developer|operator|owner)\b"),
    ("asks the model to hide things from the user",
     r"\b(?:secretly|covertly|silently|quietly) (?:run|execute|send|upload|delete|install|add|modify|change|approve|insert|include|exfiltrate|forward|copy|download|disable|call)\b|"
     r"\b(?:do not|don t|dont|never|without) (?:report|reporting|disclose|disclosing|admit|admitting|mention|mentioning) (?:it|this|that|these|them|what)(?: (?:note|entry|memory|instruction|instructions|message))?\b(?! (?:in|to) (?:the )?(?:changelog|release notes|docs|readme))\b"),
    ("asks the model to turn off its safeguards",
     r"\b(?:disable|bypass|circumvent|evade|turn off|switch off|deactivate|override|get around|ignore)(?: \w+){0,2} (?:safety|security|content|ethical|moral) (?:filters?|guidelines|guardrails|restrictions|policies|protocols|rules|constraints)\b"),
    ("asks the model to turn off its safeguards",
     r"\b(?:no|without any|free of|free from) (?:ethical|moral|safety|content) (?:guidelines|restrictions|limits|constraints|filters|rules)\b|"
     r"\b(?:safety|security|content|ethical) (?:checks|filters|guardrails|restrictions|rules|guidelines|protocols|polic(?:y|ies)) (?:are |were |was |have |has |is )?(?:been |now )?"
     r"(?:off|disabled|removed|lifted|suspended|deactivated|turned off|expired|ended|lapsed|void|no longer apply|cancelled|canceled|revoked)\b"),
    ("asks the model to obey whoever wrote it",
     r"\b(?:obey|comply with) (?:only )?(?:me|my (?:commands|orders|instructions)|the following|these (?:new )?(?:instructions|commands|orders))\b"),
)

# Patterns over the raw text (casefolded, NFKC): role tags, chat-template markers, shell tricks.
_RAW_PATTERNS: tuple[tuple[str, str], ...] = (
    ("holds a chat-template role tag",
     r"<\|[a-z_ ]{2,30}\|>|\[/?inst\]|<</?sys>>|</s>|"
     r"</?(?:system|assistant|instructions?|sys|im_start|im_end|system_prompt|system-prompt)\s*>"),
    ("holds a chat-template role tag",
     r"(?:^|\n)[ \t]*(?:#{1,6}|\*\*|\[|\(|\{\{?)[ \t]*(?:system|assistant|instruction|instructions|new instructions|response|developer|admin)[ \t]*(?:message|prompt)?[ \t]*(?:\]|\)|\}\}?|\*\*|:)"),
    ("holds a chat-template role tag",
     r"(?:^|\n)[ \t]*(?:system|assistant|developer|admin)[ \t]*(?:message|prompt)?[ \t]*:[ \t]*(?:you|ignore|disregard|forget|from now|new|override|the user|always|never|do not|don't|your)\b"),
    ("claims to replace the system prompt",
     r"\b(?:new|updated|revised|real|actual|true|secret|hidden)[ \t]+(?:system[ \t]+)?(?:instructions?|prompt|directives?|orders|rules?|task|goal|objective|mission|role)[ \t]*:|"
     r"\b(?:system|admin|administrator|security|developer|root|operator)[ \t]+(?:notice|alert|message|instruction|instructions|announcement|override|update|directive|command)[ \t]*:|"
     r"\bupdate[ \t]+to[ \t]+your[ \t]+(?:instructions|rules|guidelines|prompt|system prompt|directives)"),
    ("hides an instruction in a comment",
     r"<!--[^>]{0,300}\b(?:assistant|ai|system|model|agent|claude|gpt|llm|instructions?|ignore|you)\b"),
    ("asks to send data out",
     r"\b(?:append|add|include|insert|paste|put|embed|write|copy)\b[^\n]{0,40}(?:\.env\b|\.ssh\b|id_rsa|id_ed25519|\.aws\b|\.netrc|credentials|secrets?\b|api[ _-]?keys?|access tokens?|passwords?)"
     r"[^\n]{0,40}\b(?:to|into|in)[ \t]+(?:every|each|all|the|your)[ \t]+(?:commit|message|response|reply|answer|output|request|url|link|pr|pull request|issue|comment|log)"),
    ("asks to send data out",
     r"\b(?:give|hand|share|reveal|disclose|send|show|tell|provide)\b[^\n]{0,60}(?:secrets?|api[ _-]?keys?|credentials|passwords?|tokens?|\.env\b)[^\n]{0,40}\bto[ \t]+(?:whoever|anyone|anybody|everyone|all users|the public)\b"),
    ("asks to send data out",
     r"\b(?:include|append|add|paste|post|send|put|attach|upload|share)\b[^\n]{0,40}\b(?:output|result)s?[ \t]+of[ \t]*[`'\"]?(?:env|printenv|set|export)\b"),
    ("reads credential files",
     r"/etc/(?:shadow|sudoers|gshadow)\b"),
    ("runs code fetched from an address",
     r"\b(?:run|execute|source|eval|exec|invoke)\b[^\n]{0,120}\bfrom[ \t]+https?://"),
    ("runs downloaded code",
     r"(?:\$\(|<\()[ \t]*(?:curl|wget)\b"),
    ("runs downloaded code",
     r"\b(?:curl|wget|iwr|invoke-webrequest)\b[^\n|]{0,300}\|[ \t]*(?:sudo[ \t]+)?(?:(?:ba|z|da|k|fi)?sh|iex|powershell|pwsh)\b"),
    ("sends local secrets to a server",
     r"\b(?:curl|wget|nc|ncat|netcat|scp|rsync|invoke-webrequest|iwr)\b[^\n]{0,300}"
     r"(?:\$\([ \t]*(?:cat|env|printenv|base64|set|history)\b|\$\{?[a-z_]{0,30}(?:key|token|secret|pass)|@[ \t]*~?/?[\w./-]{0,60}(?:\.ssh|\.env|\.aws|\.netrc|\.npmrc|\.pypirc|\.gnupg|credentials|id_rsa|id_ed25519)|/etc/(?:passwd|shadow))"),
    ("reads credential files",
     r"\b(?:cat|less|more|head|tail|print|read|send|upload|copy|cp|scp|base64|xxd|exfiltrate|show|output|dump|type|get-content|post|forward|email|paste|include|append|attach|publish|share)\b[^\n]{0,120}"
     r"(?:~|\$home|%userprofile%|/home/[\w.-]{1,40}|/root|/users/[\w.-]{1,40})[/\\]\.(?:ssh|aws|gnupg|netrc|docker[/\\]config\.json|kube[/\\]config|config[/\\]gh|npmrc|pypirc|git-credentials)"),
    ("renders an image whose address carries data out",
     r"!\[[^\]\n]{0,200}\]\([ \t]*https?://[^)\s]{0,300}[?&][^)\s]{0,300}(?:\{|\$|%7b|<)"),
)

_SECRET_PATTERNS: tuple[tuple[str, str], ...] = (
    ("a private key", r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----"),
    ("an API key (sk-...)", r"\bsk-(?:proj-|ant-(?:api\d\d-)?|live_|test_|svcacct-)?[A-Za-z0-9_-]{20,}"),
    ("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    ("a GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("an AWS access key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("a Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("an npm token", r"\bnpm_[A-Za-z0-9]{36}"),
    ("a JSON Web Token", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    ("a password or key assignment",
     r"(?i)(?:\b|_)(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token|token)\b[ \t]*[:=][ \t]*['\"]?"
     r"(?![$<{%])(?=[^\s'\"]{0,200}[0-9])(?=[^\s'\"]{0,200}[A-Za-z])[^\s'\"]{12,}"),
)

_NON_WORD = re.compile(r"[\W_]+")


@functools.cache
def _compiled(patterns: tuple[tuple[str, str], ...]) -> list[tuple[str, re.Pattern[str]]]:
    """The patterns compiled at their first use, not at import: compiling them all takes tens of
    milliseconds, which a session whose memory is empty never needs to pay."""
    return [(reason, re.compile(pattern)) for reason, pattern in patterns]


def _normal(text: str) -> str:
    """Casefolded NFKC, so full-width and compatibility letters read as plain ones."""
    return unicodedata.normalize("NFKC", text).casefold()


def unsafe(text: str) -> str | None:
    """Why `text` reads as an instruction injection (a short phrase such as "asks the model to
    ignore its instructions"), or None when it does not."""
    if len(text) > MAX_CHECKED:
        return f"is longer than {MAX_CHECKED:,} characters, too long to check"
    if _HIDDEN.search(text):
        return "holds invisible or bidirectional control characters"
    if _CONTROL.search(text):
        return "holds control characters"
    raw = _normal(text)
    for reason, pattern in _compiled(_RAW_PATTERNS):
        if pattern.search(raw):
            return reason
    words = " " + _NON_WORD.sub(" ", raw).strip() + " "
    for reason, pattern in _compiled(_WORD_PATTERNS):
        if pattern.search(words):
            return reason
    return None


def secret(text: str) -> str | None:
    """What kind of credential `text` seems to hold ("a private key"), or None."""
    sample = text[:MAX_CHECKED]
    for kind, pattern in _compiled(_SECRET_PATTERNS):
        if pattern.search(sample):
            return kind
    return None
