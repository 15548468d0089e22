//===- ProgramOptions.cpp - Table-driven command line of compiled programs ===//
//
// See ProgramOptions.h. Error messages keep the wording the mains had before
// they shared this parser; tests match some of them.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/ProgramOptions.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace ddpc::runtime {

namespace {

std::string invalid(const OptionSpec &spec, const std::string &value,
                    const std::string &what) {
  if (spec.invalidMessage)
    return spec.invalidMessage;
  return "invalid value '" + value + "' for " + spec.name + " (" + what + ")";
}

/// Checks `value` against the spec's kind; "" or the error.
std::string checkValue(const OptionSpec &spec, ParsedArg &arg) {
  const std::string &v = arg.value;
  switch (spec.kind) {
  case OptionKind::Int: {
    char *end = nullptr;
    errno = 0;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || x < spec.min)
      return invalid(spec, v, "an integer >= " + std::to_string(spec.min));
    arg.intValue = x;
    return "";
  }
  case OptionKind::Double: {
    // strtod's other forms (hex, leading blanks, inf, nan) are refused, as
    // Python's argparse and PyTorch's optimizers would not take them either.
    char *end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x) ||
        v.find_first_not_of("0123456789.eE+-") != std::string::npos)
      return invalid(spec, v, "a finite decimal number, e.g. 0.01");
    arg.doubleValue = x;
    return "";
  }
  case OptionKind::String:
  case OptionKind::List:
    if (spec.nonEmpty && v.empty())
      return invalid(spec, v, "a non-empty value");
    if (!spec.choices.empty()) {
      for (const char *c : spec.choices)
        if (v == c)
          return "";
      return invalid(spec, v, joinChoices(spec.choices));
    }
    return "";
  default:
    return "";
  }
}

} // namespace

std::string joinChoices(const std::vector<const char *> &choices) {
  std::string s;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i)
      s += i + 1 == choices.size() ? " or " : ", ";
    s += choices[i];
  }
  return s;
}

ParseResult parseProgramOptions(const std::vector<OptionSpec> &table,
                                const ParserSettings &settings, int argc,
                                char **argv) {
  ParseResult result;
  size_t positional = table.size();
  for (size_t s = 0; s < table.size(); ++s)
    if (table[s].kind == OptionKind::Positional)
      positional = s;
  bool endOfOptions = false;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (!endOfOptions && settings.doubleDashEndsOptions &&
        !std::strcmp(a, "--")) {
      endOfOptions = true;
      continue;
    }
    ParsedArg arg{table.size(), "", 0, 0};
    bool inlineValue = false;
    for (size_t s = 0; !endOfOptions && s < table.size(); ++s) {
      const OptionSpec &spec = table[s];
      if (spec.kind == OptionKind::Positional)
        continue;
      size_t len = std::strlen(spec.name);
      if (!std::strcmp(a, spec.name) ||
          (spec.alias && !std::strcmp(a, spec.alias))) {
        arg.spec = s;
        break;
      }
      if (spec.kind != OptionKind::Flag && !std::strncmp(a, spec.name, len) &&
          a[len] == '=') {
        arg.spec = s, arg.value = a + len + 1, inlineValue = true;
        break;
      }
    }
    if (arg.spec == table.size()) {
      bool looksLikeOption = !endOfOptions && a[0] == '-' && a[1] != '\0';
      if (positional == table.size() || looksLikeOption) {
        result.error =
            std::string(settings.unknownWhat) + " '" + a + "' (see --help)";
        return result;
      }
      arg.spec = positional, arg.value = a;
      result.args.push_back(std::move(arg));
      continue;
    }
    const OptionSpec &spec = table[arg.spec];
    if (spec.kind != OptionKind::Flag && !inlineValue) {
      if (i + 1 >= argc) {
        result.error = spec.missingMessage ? std::string(spec.missingMessage)
                                           : std::string("option ") +
                                                 spec.name + " needs a value";
        return result;
      }
      arg.value = argv[++i];
    }
    std::string err = checkValue(spec, arg);
    if (!err.empty()) {
      result.error = err;
      return result;
    }
    result.args.push_back(std::move(arg));
    if (spec.endsParsing)
      return result;
  }
  return result;
}

std::string formatOptionHelp(const std::vector<OptionSpec> &table,
                             size_t column) {
  std::string out;
  std::string indent(column + 4, ' ');
  for (const OptionSpec &spec : table) {
    std::string label = spec.name;
    if (spec.metavar && *spec.metavar)
      label += std::string(" ") + spec.metavar;
    out += "  " + label;
    out += std::string(
        label.size() < column + 2 ? column + 2 - label.size() : 1, ' ');
    for (const char *p = spec.help; *p; ++p) {
      out += *p;
      if (*p == '\n')
        out += indent;
    }
    out += '\n';
  }
  return out;
}

const char *optionKindName(OptionKind kind) {
  switch (kind) {
  case OptionKind::Flag:
    return "flag";
  case OptionKind::Int:
    return "int";
  case OptionKind::Double:
    return "double";
  case OptionKind::String:
    return "string";
  case OptionKind::List:
    return "list";
  case OptionKind::Positional:
    return "positional";
  }
  return "";
}

} // namespace ddpc::runtime
