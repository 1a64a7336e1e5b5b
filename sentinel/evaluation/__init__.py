"""The evaluation: the single writer of health state, and the incidents it opens."""
