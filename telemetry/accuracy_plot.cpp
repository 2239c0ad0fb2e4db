#include "telemetry/accuracy_plot.hpp"

#include <sstream>

namespace gridtrain::telemetry {

std::string accuracy_plot_script(const std::string& csv, const std::vector<std::string>& nodes,
                                 const std::string& png, const std::string& title) {
  std::ostringstream g;
  g << "set terminal pngcairo size 900,560\n"
       "set output '" << png << "'\n"
       "set datafile separator ','\n"
       "set title '" << title << "'\n"
       "set xlabel 'time since the node started training (s)'\n"
       "set ylabel 'test accuracy'\n"
       "set key bottom right\n"
       "set grid\n"
       "plot ";
  // Column 1 is time_s, 2 the node, 7 test_accuracy; each curve keeps the rows of its node.
  for (std::size_t i = 0; i < nodes.size(); ++i)
    g << (i ? ", " : "") << "'" << csv << "' using 1:(strcol(2) eq '" << nodes[i]
      << "' ? $7 : NaN) skip 1 with linespoints title 'node " << nodes[i] << "'";
  g << "\n";
  return g.str();
}

}  // namespace gridtrain::telemetry
