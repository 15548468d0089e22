//===- ProgramOptions.h - Table-driven command line of compiled programs --===//
//
// One parser for the mains of compiled programs (TrainMain.cpp,
// InferenceMain.cpp): each main describes its options in one table of
// OptionSpec; the same table parses `--opt value` and `--opt=value`, checks
// values (integers with a minimum, finite decimals, choices) and prints the
// option lines of --help. The training table (trainProgramOptions) is also
// what the Python package builds `Program.train`'s command line from.
//
// No MLIR, LLVM or MPI here: this is linked into the emitted programs.
//
//===----------------------------------------------------------------------===//

#ifndef DDPC_RUNTIME_PROGRAMOPTIONS_H
#define DDPC_RUNTIME_PROGRAMOPTIONS_H

#include <cstdint>
#include <string>
#include <vector>

namespace ddpc::runtime {

/// What an option takes. Flag: nothing (`--quiet`; `--quiet=x` is unknown).
/// Int: a decimal integer >= OptionSpec::min. Double: a finite decimal
/// number (`1e-3`, `.5`; no hex, blanks, inf or nan). String: any text, or
/// one of OptionSpec::choices. List: a String that may be repeated, every
/// occurrence kept. Positional: not an option; the help line of the words
/// that do not start with '-' (a table without one refuses them).
enum class OptionKind { Flag, Int, Double, String, List, Positional };

struct OptionSpec {
  const char *name; ///< "--epochs" (Positional: "FILE")
  OptionKind kind;
  const char *metavar; ///< "E" in "--epochs E"; "" for flags
  const char *help;    ///< --help text; '\n' starts a new line
  int64_t min = 0;     ///< Int: the smallest accepted value
  std::vector<const char *> choices = {}; ///< String: the accepted values
  const char *alias = nullptr;            ///< another spelling ("-h")
  bool nonEmpty = false;                  ///< String: refuse an empty value
  bool endsParsing = false; ///< stop parsing here (inference --help)
  const char *missingMessage = nullptr; ///< instead of "option X needs a value"
  const char *invalidMessage = nullptr; ///< instead of "invalid value ..."
};

/// How words outside the table are treated.
struct ParserSettings {
  /// "unknown argument" (training) or "unknown option" (inference); the
  /// message is "<this> '<word>' (see --help)".
  const char *unknownWhat = "unknown argument";
  /// `--` ends the options: every later word is positional.
  bool doubleDashEndsOptions = false;
};

/// One parsed word (or option with its value), in command-line order.
struct ParsedArg {
  size_t spec;       ///< index into the table
  std::string value; ///< as given ("" for flags)
  int64_t intValue = 0;
  double doubleValue = 0;
};

/// The parsed arguments up to the first error; `error` is "" when the whole
/// command line parsed. Mains handle `args` in order before reporting
/// `error`, so that errors come in command-line order.
struct ParseResult {
  std::vector<ParsedArg> args;
  std::string error;
};

ParseResult parseProgramOptions(const std::vector<OptionSpec> &table,
                                const ParserSettings &settings, int argc,
                                char **argv);

/// The option lines of --help, in table order: "  NAME METAVAR" padded to
/// `column` + 2 characters, then the help, continuation lines indented as
/// far. Each line ends with '\n'.
std::string formatOptionHelp(const std::vector<OptionSpec> &table,
                             size_t column);

/// "a", "a or b", "a, b or c".
std::string joinChoices(const std::vector<const char *> &choices);

/// The table of training programs (TrainMain.cpp). Help texts hold the
/// placeholders {inputs} (the data inputs' names) and {lr} (the compiled
/// learning rate), which TrainMain fills in.
const std::vector<OptionSpec> &trainProgramOptions();

/// "flag", "int", "double", "string", "list" or "positional".
const char *optionKindName(OptionKind kind);

} // namespace ddpc::runtime

#endif // DDPC_RUNTIME_PROGRAMOPTIONS_H
