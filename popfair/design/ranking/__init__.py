"""The ranking (list-wise) audit: k candidates in one prompt, equally qualified, names signalling
sex x race/ethnicity groups, order counterbalanced (`trials`); the screener returns an order
(`design`, read by `parse`); top-1 rates and LL144 impact ratios, mean ranks, pairwise orders,
position effects and a rank-ordered (exploded Plackett-Luce) logit (`estimate`); the trials needed
to detect a group effect from the winner alone or from the whole ranking (`power`)."""
