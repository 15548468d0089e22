//===- ProgramOptionsTest.cpp - The programs' command-line parser ---------===//
//
// parseProgramOptions and formatOptionHelp (ProgramOptions.h) on a small
// table and on the training programs' table: both spellings of a value,
// missing values, unknown options, value checks, positionals and --help.
//
//===----------------------------------------------------------------------===//

#include "ddpc/Runtime/ProgramOptions.h"

#include <gtest/gtest.h>

using namespace ddpc::runtime;

namespace {

ParseResult parse(const std::vector<OptionSpec> &table,
                  std::vector<const char *> words,
                  const ParserSettings &settings = ParserSettings{}) {
  words.insert(words.begin(), "prog");
  return parseProgramOptions(table, settings, static_cast<int>(words.size()),
                             const_cast<char **>(words.data()));
}

const std::vector<OptionSpec> &smallTable() {
  static const std::vector<OptionSpec> table = {
      {"--count", OptionKind::Int, "N", "how many", 1},
      {"--rate", OptionKind::Double, "R", "how fast"},
      {"--mode", OptionKind::String, "M", "which\nway", 0, {"a", "b", "c"}},
      {"--file", OptionKind::List, "F", "files"},
      {"--quiet", OptionKind::Flag, "", "say nothing", 0, {}, "-q"},
  };
  return table;
}

TEST(ProgramOptions, BothSpellingsOfAValue) {
  ParseResult r = parse(smallTable(), {"--count", "3", "--rate=0.5", "--file=x",
                                       "--file", "y", "-q"});
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.args.size(), 5u);
  EXPECT_EQ(r.args[0].spec, 0u);
  EXPECT_EQ(r.args[0].intValue, 3);
  EXPECT_EQ(r.args[1].doubleValue, 0.5);
  EXPECT_EQ(r.args[2].value, "x");
  EXPECT_EQ(r.args[3].value, "y");
  EXPECT_EQ(r.args[4].spec, 4u);
}

TEST(ProgramOptions, MissingValue) {
  ParseResult r = parse(smallTable(), {"--quiet", "--count"});
  EXPECT_EQ(r.error, "option --count needs a value");
  EXPECT_EQ(r.args.size(), 1u); // what came before the error
}

TEST(ProgramOptions, UnknownOption) {
  EXPECT_EQ(parse(smallTable(), {"--counts", "3"}).error,
            "unknown argument '--counts' (see --help)");
  // A flag takes no value.
  EXPECT_EQ(parse(smallTable(), {"--quiet=1"}).error,
            "unknown argument '--quiet=1' (see --help)");
  // No positional entry: every word is an argument to refuse.
  EXPECT_EQ(parse(smallTable(), {"file.npy"}).error,
            "unknown argument 'file.npy' (see --help)");
  ParserSettings settings;
  settings.unknownWhat = "unknown option";
  EXPECT_EQ(parse(smallTable(), {"-x"}, settings).error,
            "unknown option '-x' (see --help)");
}

TEST(ProgramOptions, ValueChecks) {
  EXPECT_EQ(parse(smallTable(), {"--count=0"}).error,
            "invalid value '0' for --count (an integer >= 1)");
  EXPECT_EQ(parse(smallTable(), {"--count", "2x"}).error,
            "invalid value '2x' for --count (an integer >= 1)");
  EXPECT_EQ(parse(smallTable(), {"--rate", "inf"}).error,
            "invalid value 'inf' for --rate (a finite decimal number, e.g. "
            "0.01)");
  EXPECT_EQ(parse(smallTable(), {"--rate", "0x10"}).error,
            "invalid value '0x10' for --rate (a finite decimal number, e.g. "
            "0.01)");
  EXPECT_EQ(parse(smallTable(), {"--mode", "d"}).error,
            "invalid value 'd' for --mode (a, b or c)");
  EXPECT_EQ(parse(smallTable(), {"--mode=b"}).error, "");
}

TEST(ProgramOptions, PositionalsAndDoubleDash) {
  std::vector<OptionSpec> table = {
      {"FILE", OptionKind::Positional, "", "inputs"},
      {"--time",
       OptionKind::Int,
       "N",
       "runs",
       0,
       {},
       nullptr,
       false,
       false,
       "--time needs a non-negative integer",
       "--time needs a non-negative integer"},
      {"--help", OptionKind::Flag, "", "help", 0, {}, "-h", false, true},
  };
  ParserSettings settings;
  settings.doubleDashEndsOptions = true;
  ParseResult r = parse(table, {"a.npy", "-", "--", "--time"}, settings);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.args.size(), 3u);
  EXPECT_EQ(r.args[2].spec, 0u);
  EXPECT_EQ(r.args[2].value, "--time");
  EXPECT_EQ(parse(table, {"--time"}, settings).error,
            "--time needs a non-negative integer");
  EXPECT_EQ(parse(table, {"--time=-1"}, settings).error,
            "--time needs a non-negative integer");
  // --help ends parsing: what follows is not looked at.
  r = parse(table, {"-h", "--bogus"}, settings);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.args.size(), 1u);
}

TEST(ProgramOptions, HelpLines) {
  EXPECT_EQ(formatOptionHelp(smallTable(), 10), "  --count N   how many\n"
                                                "  --rate R    how fast\n"
                                                "  --mode M    which\n"
                                                "              way\n"
                                                "  --file F    files\n"
                                                "  --quiet     say nothing\n");
}

TEST(ProgramOptions, TrainTable) {
  const std::vector<OptionSpec> &table = trainProgramOptions();
  ParseResult r = parse(table, {"--data", "x.npy", "--epochs=2", "--nan-policy",
                                "skip", "--lr", "1e-3"});
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.args.size(), 4u);
  EXPECT_STREQ(table[r.args[1].spec].name, "--epochs");
  EXPECT_EQ(r.args[1].intValue, 2);
  EXPECT_EQ(parse(table, {"--nan-policy", "maybe"}).error,
            "invalid value 'maybe' for --nan-policy (stop, skip or ignore)");
  EXPECT_EQ(parse(table, {"--checkpoint-every", "0"}).error,
            "invalid value '0' for --checkpoint-every (an integer >= 1)");
  EXPECT_EQ(parse(table, {"--labels"}).error, "option --labels needs a value");
}

} // namespace
