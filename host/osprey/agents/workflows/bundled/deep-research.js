// Research a question on the web: plan sub-questions, research them in parallel (web_search, web_fetch), merge a report citing its sources by URL.
//
// /deep-research QUESTION runs it. One planner agent splits the question into at most
// MAX_RESEARCHERS sub-questions; one researcher agent per sub-question searches and reads pages
// (they run in parallel); one writer agent merges their findings into a Markdown report whose
// claims cite the pages by URL. The run's result is the report.

const MAX_RESEARCHERS = 5;          // researchers started at most (the fan-out's bound)
const MAX_QUESTION_CHARS = 4000;    // a longer question is refused
const MAX_SUB_QUESTION_CHARS = 500; // a longer planner line is dropped
const MAX_FINDINGS_CHARS = 12000;   // of each researcher's findings, given to the writer
const MAX_SOURCES = 50;             // URLs kept for the sources list

function subQuestions(planText, question) {
  const lines = String(planText || "").slice(0, 20000).split("\n")
    .map((line) => line.replace(/^\s*(?:[-*+]|\d{1,2}[.)])\s*/, "").trim())
    .filter((line) => line.length > 0 && line.length <= MAX_SUB_QUESTION_CHARS);
  const unique = [...new Set(lines)].slice(0, MAX_RESEARCHERS);
  return unique.length > 0 ? unique : [question];
}

function urlsIn(text) {
  const found = String(text || "").slice(0, 100000).match(/https?:\/\/[^\s<>"'`\])]+/g) || [];
  return found.map((url) => url.replace(/[.,;:!?*_]+$/, ""));
}

function planPrompt(question) {
  return [
    "Split this research question into at most " + MAX_RESEARCHERS + " distinct sub-questions that can each be",
    "researched on the web on its own, and that together answer it. Answer with the sub-questions only,",
    "one a line, with no numbering, no preamble and no other text. Use no tools.",
    "",
    "Question: " + question,
  ].join("\n");
}

function researchPrompt(question, sub) {
  return [
    "You research one part of a larger question on the web.",
    "",
    "The larger question: " + question,
    "Your part: " + sub,
    "",
    "Use web_search to find sources, then web_fetch to read the most relevant pages (read a page",
    "before you rely on it). Answer with your findings: concise facts, each followed by the URL of the",
    "page it comes from. Cite only pages you read. End with a line `Sources:` and the URLs you read, one a line.",
  ].join("\n");
}

function mergePrompt(question, findings, sources) {
  const parts = [
    "Write a research report that answers the question below from the researchers' findings only.",
    "Cite the source of each claim by its URL, inline, and end with a `Sources` section listing every URL",
    "you cited. Say plainly where the findings disagree or leave the question open. Use no tools.",
    "",
    "Question: " + question,
    "",
  ];
  findings.forEach((finding, i) => {
    parts.push("## Findings " + (i + 1) + ": " + finding.sub, "", finding.text.slice(0, MAX_FINDINGS_CHARS), "");
  });
  parts.push("## URLs the researchers cited", "", ...sources);
  return parts.join("\n");
}

async function main(osprey) {
  const question = String(osprey.args || "").trim();
  if (!question) {
    throw new Error("deep-research needs a question: /deep-research QUESTION");
  }
  if (question.length > MAX_QUESTION_CHARS) {
    throw new Error("the question is longer than " + MAX_QUESTION_CHARS + " characters; shorten it");
  }

  if (!osprey.tools.includes("web_search")) {
    throw new Error("deep-research needs a web search service, and none is configured: set EXA_API_KEY or BRAVE_API_KEY, "
      + "or [web_search] searxng_url in config.toml, then start a new session (`osprey docs web-tools` has the details)");
  }
  osprey.log("planning the research");
  const plan = await osprey.agent({ prompt: planPrompt(question), tools: [] });
  if (plan.outcome !== "Completed") {
    throw new Error("the planner did not complete (" + plan.outcome + ")");
  }
  const subs = subQuestions(plan.text, question);
  osprey.log(subs.length + " researchers: " + subs.join(" | "));

  const researched = await Promise.all(subs.map((sub) =>
    osprey.agent({ prompt: researchPrompt(question, sub), tools: ["web_search", "web_fetch"] })
      .then((answer) => ({ sub, outcome: answer.outcome, text: String(answer.text || "") }))
      .catch((error) => ({ sub, outcome: "Error", text: String(error && error.message ? error.message : error) }))));
  const findings = researched.filter((r) => r.outcome === "Completed" && r.text.trim());
  const failed = researched.filter((r) => !findings.includes(r));
  failed.forEach((r) => osprey.log("no findings for: " + r.sub + " (" + r.outcome + ": " + r.text.slice(0, 200) + ")"));
  if (findings.length === 0) {
    throw new Error("no researcher returned findings: " + failed.map((r) => r.outcome + ": " + r.text.slice(0, 200)).join("; "));
  }
  const sources = [...new Set(findings.flatMap((f) => urlsIn(f.text)))].slice(0, MAX_SOURCES);
  osprey.log(findings.length + " findings citing " + sources.length + " URLs; writing the report");

  const merged = await osprey.agent({ prompt: mergePrompt(question, findings, sources), tools: [] });
  if (merged.outcome !== "Completed" || !String(merged.text || "").trim()) {
    throw new Error("the report writer did not complete (" + merged.outcome + ")");
  }
  let report = String(merged.text).trim();
  // Every URL the researchers cited is listed, whether or not the writer kept it.
  const uncited = sources.filter((url) => !report.includes(url));
  if (uncited.length > 0) {
    report += "\n\n## Sources the researchers cited\n\n" + uncited.map((url) => "- " + url).join("\n");
  }
  return report;
}
